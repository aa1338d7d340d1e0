import TokendJSON
import TokendProtocol
import TokendStorage

/// `AdoptStore`'s request and reply.
enum StoreAdoptionReplies {
    /// Credentials listed per kind; the counts say how many there are in all.
    static let listedRows = 200

    static func request(_ parameters: JSONObject) throws(VarlinkError) -> StoreAdoptionRequest {
        let reader = ParameterReader(parameters)
        return StoreAdoptionRequest(
            dryRun: try reader.optionalBool("dryRun") ?? false, restored: try reader.optionalBool("restored") ?? false)
    }

    static func parameters(_ report: StoreAdoptionReport) -> JSONObject {
        func rows(_ rows: [StoreAdoptionReport.Row]) -> JSONValue {
            .array(
                rows.prefix(listedRows).map { row in
                    var object: JSONObject = [
                        "userIdentifier": .string(row.userIdentifier), "provider": .string(row.provider),
                        "readers": .array(row.readers.map { .string($0) }), "enrolledUid": .int(row.enrolledUID),
                        "generation": .int(row.generation),
                    ]
                    object.setIfPresent("problem", row.problem.map { .string($0) })
                    return .object(object)
                })
        }
        var parameters: JSONObject = [
            "storeId": .string(report.storeID), "schemaVersionBefore": .int(Int64(report.schemaVersionBefore)),
            "schemaVersion": .int(Int64(report.schemaVersion)),
            "tagged": rows(report.tagged), "taggedCount": .int(Int64(report.tagged.count)),
            "carriedOver": .int(Int64(report.carriedOver)),
            "rolledBack": rows(report.rolledBack), "rolledBackCount": .int(Int64(report.rolledBack.count)),
            "refused": rows(report.refused), "refusedCount": .int(Int64(report.refused.count)),
            "credentials": .int(Int64(report.credentials)), "dryRun": .bool(report.dryRun), "restored": .bool(report.restored),
        ]
        parameters.setIfPresent("recordedStoreId", report.recordedStoreID.map { .string($0) })
        parameters.setIfPresent("heldBecause", report.heldBecause.map { .string($0) })
        return parameters
    }
}

import TokendJSON
import TokendProtocol

/// What adopting the shared store did or would do (``TokendClient/adoptStore(dryRun:restored:)``).
public struct StoreAdoption: Sendable, Hashable {
    /// A credential adoption tagged as it stands, found older than the node had seen, or left refused.
    public struct Credential: Sendable, Hashable {
        public var userIdentifier: String
        public var provider: String
        public var readers: [String]
        public var enrolledUID: Int64
        public var generation: Int64
        /// Why it stays refused, or what about it needs a look.
        public var problem: String?
    }

    /// The store's id after adoption, and the one the node had recorded if that differs.
    public var storeID: String
    public var recordedStoreID: String?
    public var schemaVersionBefore: Int
    public var schemaVersion: Int
    /// Why the node served none of the store's credentials before, if it did not.
    public var heldBecause: String?
    /// Credentials without a tag, tagged as the last dry run showed them (at most 200 listed;
    /// ``taggedCount`` in all).
    public var tagged: [Credential]
    public var taggedCount: Int
    /// Credentials whose tag of an earlier format checked out, tagged for this store.
    public var carriedOver: Int
    /// Credentials older than the node had seen: served when ``restored``, else still refused.
    public var rolledBack: [Credential]
    public var rolledBackCount: Int
    /// Credentials that stay refused.
    public var refused: [Credential]
    public var refusedCount: Int
    /// How many credentials the node serves from the store afterwards.
    public var credentials: Int
    public var dryRun: Bool
    public var restored: Bool
}

extension TokendClient {
    /// Confirms the shared store as it is now (administrators only): its id, its schema, the
    /// credentials that carry no tag (tagged as a `dryRun` before showed them: check their
    /// readers there first), and the node's record of it. `restored`: the store was restored from an older
    /// copy on purpose, so credentials older than the node had seen are served.
    ///
    /// - Throws: ``TokendClientError``: `permissionDenied`, `storageFailed` (a SQLite store, or
    ///   the database could not be reached).
    public func adoptStore(dryRun: Bool, restored: Bool) async throws(TokendClientError) -> StoreAdoption {
        let call = VarlinkCall(
            method: TokenProviderMethod.adoptStore.rawValue, parameters: ["dryRun": .bool(dryRun), "restored": .bool(restored)])
        let reply = try await singleReply(call)
        do {
            return try Self.storeAdoption(reply.parameters)
        } catch {
            throw Self.invalidReply(call, error)
        }
    }

    static func storeAdoption(_ parameters: JSONObject) throws(VarlinkError) -> StoreAdoption {
        let reader = ParameterReader(parameters)
        func count(_ name: String) throws(VarlinkError) -> Int {
            guard let value = Int(exactly: try reader.int(name)), value >= 0 else { throw .invalidParameter(name) }
            return value
        }
        func credentials(_ name: String) throws(VarlinkError) -> [StoreAdoption.Credential] {
            guard case .array(let elements)? = parameters[name] else { throw .invalidParameter(name) }
            var result: [StoreAdoption.Credential] = []
            for element in elements {
                guard case .object(let object) = element else { throw .invalidParameter(name) }
                let row = ParameterReader(object)
                result.append(
                    StoreAdoption.Credential(
                        userIdentifier: try row.string("userIdentifier"), provider: try row.string("provider"),
                        readers: try row.optionalStringArray("readers") ?? [], enrolledUID: try row.int("enrolledUid"),
                        generation: try row.int("generation"), problem: try row.optionalString("problem")))
            }
            return result
        }
        return StoreAdoption(
            storeID: try reader.string("storeId"), recordedStoreID: try reader.optionalString("recordedStoreId"),
            schemaVersionBefore: try count("schemaVersionBefore"), schemaVersion: try count("schemaVersion"),
            heldBecause: try reader.optionalString("heldBecause"), tagged: try credentials("tagged"), taggedCount: try count("taggedCount"),
            carriedOver: try count("carriedOver"), rolledBack: try credentials("rolledBack"), rolledBackCount: try count("rolledBackCount"),
            refused: try credentials("refused"), refusedCount: try count("refusedCount"), credentials: try count("credentials"),
            dryRun: try reader.optionalBool("dryRun") ?? false, restored: try reader.optionalBool("restored") ?? false)
    }
}

import Foundation
import Logging
import NIOCore
import PostgresNIO
import TokendStorage

/// An administrator confirms the shared store as it is (`tokenctl store adopt`): the only way
/// rows without a tag are ever tagged, and the way a node that holds the store (another id,
/// none, a lower schema version, see ``StoreAdmission``) serves it again.
extension PostgresCredentialStore: AdoptableStore {
    /// How long an adoption may take: it reads (and may tag) every row in one transaction,
    /// under the migration lock, which nodes starting meanwhile wait for.
    static let adoptionLimit = Duration.seconds(1800)

    public func adopt(_ request: StoreAdoptionRequest) async throws -> StoreAdoptionReport {
        let node = settings.nodeName
        let logger = logger
        let cipher = cipher
        let record = memory.record
        let floors = memory.floors()
        let held = heldReason.withLock { $0 }
        let previewed = previewedTags.withLock { $0 }
        let limit = max(Self.adoptionLimit, .milliseconds(settings.operationTimeoutMilliseconds))
        let (report, accepted, keptFloors, vouched): (StoreAdoptionReport, [String: Int64], Bool, [String: [UInt8]]) = try await run(
            "adopt the shared store", limit: limit
        ) { client in
            do {
                return try await client.withTransaction(logger: logger) { connection in
                    try await connection.query("SELECT pg_advisory_xact_lock(\(Self.migrationLockKey))", logger: logger).collect()
                    let outcome = try await self.adopt(
                        connection, request: request, record: record, floors: floors, held: held, previewed: previewed, node: node,
                        cipher: cipher)
                    // A dry run leaves everything as it was: the transaction is rolled back.
                    if request.dryRun { throw DryRun(outcome: outcome) }
                    return outcome
                }
            } catch let error as PostgresTransactionError {
                // A dry run's rollback went through: its outcome is the answer.
                if let dryRun = error.closureError as? DryRun, error.rollbackError == nil { return dryRun.outcome }
                throw error
            }
        }
        // What the administrator is shown is what a later adoption may tag, and nothing else.
        previewedTags.withLock { $0 = request.dryRun ? vouched : [:] }
        guard !request.dryRun else { return report }
        try memory.remember(SharedStoreRecord(storeID: report.storeID, schemaVersion: report.schemaVersion), keyring: cipher.keyring)
        let adopted = accepted.mapValues { SharedStoreMemory.Floor(generation: $0) }
        if keptFloors {
            try await keepFloors(adopted)
        } else {
            try memory.replaceFloors(with: adopted)
        }
        storeIDBox.withLock { $0 = report.storeID }
        heldReason.withLock { $0 = nil }
        logger.notice(
            "an administrator adopted the shared store",
            metadata: [
                "store_id": "\(report.storeID)", "tagged": "\(report.tagged.count)", "carried_over": "\(report.carriedOver)",
                "refused": "\(report.refused.count)", "restored": "\(request.restored)",
            ])
        return report
    }

    /// Carries the dry run's outcome out of the transaction it rolls back.
    private struct DryRun: Error {
        let outcome: (StoreAdoptionReport, [String: Int64], Bool, [String: [UInt8]])
    }

    /// The adoption, in the transaction and under the migration lock: the report, the
    /// generations of the rows served from now on, whether this node's floors still apply
    /// (the same store, not restored), and the tags it gives (a dry run: would give) rows
    /// without one. A row without a tag is tagged only as the last dry run (`previewed`) showed
    /// it: a row changed since, or never shown, stays refused.
    private func adopt(
        _ connection: PostgresConnection, request: StoreAdoptionRequest, record: SharedStoreMemory.Record,
        floors: [String: SharedStoreMemory.Floor], held: String?, previewed: [String: [UInt8]], node: String, cipher: CredentialCipher
    ) async throws -> (StoreAdoptionReport, [String: Int64], Bool, [String: [UInt8]]) {
        let observed = try await Self.observe(connection, logger: logger)
        guard observed.schemaVersion <= Self.migrations.count else {
            throw StorageError(
                code: .database,
                message: "the shared store has schema version \(observed.schemaVersion), newer than this build knows "
                    + "(\(Self.migrations.count)); refusing to adopt it")
        }
        var recordedID: String?
        if case .known(let known) = record { recordedID = known.storeID }
        // A store whose id was deleted gets back the one this node knew: its rows are tagged for it.
        let id = observed.storeID ?? recordedID ?? Self.newStoreID()
        _ = try await Self.applyMigrations(connection, from: observed.schemaVersion, node: node, logger: logger)
        if observed.storeID == nil { try await Self.setStoreID(id, connection, logger: logger) }
        // Floors seen before a restore on purpose say nothing about these rows. Those of a store
        // with another id are kept too: an id is a column anyone who can write the tables can
        // change, and changed and set back it would otherwise let every rolled-back row in.
        let keptFloors = !request.restored
        // Tags that name no store are carried over for a node's own upgrade; one that has served
        // a store with tags that name it finds them only where someone wrote them in (from
        // another store sharing the key, or a backup of that time).
        var servedStoreBoundTags = false
        if case .known(let known) = record { servedStoreBoundTags = known.schemaVersion >= StoreAdmission.storeBoundTagsVersion }
        var tagged: [StoreAdoptionReport.Row] = []
        var rolledBack: [StoreAdoptionReport.Row] = []
        var refused: [StoreAdoptionReport.Row] = []
        var carriedOver = 0
        var accepted: [String: Int64] = [:]
        var tags: [(String, [UInt8])] = []
        var vouched: [String: [UInt8]] = [:]
        for try await row in try await connection.query(
            PostgresQuery(unsafeSQL: "SELECT \(Self.selectColumns) FROM tokend_credentials ORDER BY user_identifier"), logger: logger
        ) {
            let summary = Self.summary(of: row)
            let stored: (authenticity: RowAuthenticity, generation: Int64, tag: [UInt8]?)
            do {
                stored = try Self.authenticity(of: row)
            } catch {
                refused.append(summary.with(problem: "\(error)"))
                continue
            }
            let user = summary.userIdentifier
            func verifies(for store: String) -> Bool {
                (try? RowAuthentication.verify(
                    stored.tag, store: store, userIdentifier: user, contentDigest: stored.authenticity.contentDigest,
                    status: stored.authenticity.status, generation: stored.generation, keyring: cipher.keyring)) != nil
            }
            let newTag = stored.authenticity.tag(store: id, user, generation: stored.generation, keyring: cipher.keyring)
            if verifies(for: id) {
                // Already this store's.
            } else if stored.tag == nil {
                // Tags came before floors: a credential this node has a floor for, it has seen
                // tagged. Without its tag it is a row someone stripped (its generation is then
                // anyone's to choose), not one from before tags.
                if keptFloors, let floor = floors[user] {
                    refused.append(
                        summary.with(
                            problem: "it has no tag, but this node has seen it authenticated (generation \(floor.generation)"
                                + "\(floor.removed ? ", removed" : "")): its tag was removed"))
                    continue
                }
                guard (try? Self.credential(from: row, cipher: cipher)) != nil else {
                    refused.append(summary.with(problem: "it has no tag and its tokens do not open with the master key"))
                    continue
                }
                // The tag covers every column the dry run showed (and the generation): equal
                // tags, an unchanged row.
                vouched[user] = newTag
                guard request.dryRun || previewed[user] == newTag else {
                    refused.append(
                        summary.with(
                            problem: "it has no tag and was not listed, as it is now, by a dry run of this node: run `tokenctl store "
                                + "adopt --dry-run`, check it, and adopt again"))
                    continue
                }
                tagged.append(summary)
                tags.append((user, newTag))
            } else if RowAuthentication.formatVersion(of: stored.tag) == RowAuthentication.legacyVersion, servedStoreBoundTags, keptFloors {
                refused.append(
                    summary.with(
                        problem: "its tag is of the earlier format, which names no store, but this node has served the store with tags "
                            + "that name it: it was written in from elsewhere"))
                continue
            } else if RowAuthentication.formatVersion(of: stored.tag) == RowAuthentication.legacyVersion,
                (try? RowAuthentication.verifyLegacy(
                    stored.tag, userIdentifier: user, contentDigest: stored.authenticity.contentDigest, status: stored.authenticity.status,
                    generation: stored.generation, keyring: cipher.keyring)) != nil
            {
                carriedOver += 1
                tags.append((user, newTag))
            } else {
                let problem =
                    if let recordedID, recordedID != id, verifies(for: recordedID) {
                        "it is tagged for store \(recordedID), the id this node knew: the store's id was changed"
                    } else {
                        "its tag does not match it: it was changed outside tokend, or comes from another store"
                    }
                refused.append(summary.with(problem: problem))
                continue
            }
            if let floor = floors[user], floor.refuses(stored.generation) {
                rolledBack.append(
                    summary.with(problem: "this node has seen generation \(floor.generation)\(floor.removed ? ", removed" : "")"))
                guard request.restored else { continue }
            }
            accepted[user] = stored.generation
        }
        for (user, tag) in tags {
            try await connection.query(
                "UPDATE tokend_credentials SET row_mac = \(ByteBuffer(bytes: tag)) WHERE user_identifier = \(user)", logger: logger
            ).collect()
        }
        let report = StoreAdoptionReport(
            storeID: id, recordedStoreID: recordedID == id ? nil : recordedID, schemaVersionBefore: observed.schemaVersion,
            schemaVersion: Self.migrations.count, heldBecause: held, tagged: tagged, carriedOver: carriedOver, rolledBack: rolledBack,
            refused: refused, credentials: accepted.count, dryRun: request.dryRun, restored: request.restored)
        return (report, accepted, keptFloors, vouched)
    }

    /// Who a row lets read it, from its columns as stored (not decrypted, not trusted): what an
    /// administrator checks before vouching for it.
    static func summary(of row: PostgresRow) -> StoreAdoptionReport.Row {
        let cells = row.makeRandomAccess()
        let readersText = (try? cells["readers"].decode(String.self)) ?? ""
        let readers = (try? JSONDecoder().decode([String].self, from: Data(readersText.utf8))) ?? [readersText]
        return StoreAdoptionReport.Row(
            userIdentifier: (try? cells["user_identifier"].decode(String.self)) ?? "?",
            provider: (try? cells["provider"].decode(String.self)) ?? "?", readers: readers,
            enrolledUID: (try? cells["enrolled_uid"].decode(Int64.self)) ?? -1,
            generation: (try? cells["generation"].decode(Int64.self)) ?? -1)
    }
}

extension StoreAdoptionReport.Row {
    func with(problem: String) -> Self {
        var row = self
        row.problem = problem
        return row
    }
}

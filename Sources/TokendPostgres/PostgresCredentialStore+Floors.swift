import Foundation
import Logging
import PostgresNIO
import TokendStorage

extension PostgresCredentialStore {
    /// The file in which nodes of earlier versions kept their floors (``GenerationFloors``).
    static let legacyFloorsFileName = "shared-store-generations.json"

    /// Carries the floors file of an earlier version over into the node's memory, once: its
    /// store id becomes the node's record (at the first schema version with row tags, the
    /// oldest it can have been written at), its floors the node's floors. The file is removed
    /// afterwards.
    func importLegacyFloors() {
        guard let directory = settings.stateDirectory, memory.record == .none else { return }
        let file = directory + "/" + Self.legacyFloorsFileName
        let bytes: [UInt8]?
        do {
            // 1,000,000 credentials take about 40 MB.
            bytes = try StateFile.read(file, limit: 256 << 20)
        } catch let error as StorageError {
            logger.error("\(error.message)")
            return
        } catch {
            return
        }
        guard let bytes else { return }
        guard let saved = GenerationFloors.decoded(bytes) else {
            logger.error("\(file) cannot be read as a record of generations; it is left as it is")
            return
        }
        do {
            try memory.replaceFloors(with: saved.floors.mapValues { SharedStoreMemory.Floor(generation: $0) })
            try memory.remember(
                SharedStoreRecord(storeID: saved.store, schemaVersion: Self.rowAuthenticationVersion), keyring: cipher.keyring)
            try? FileManager.default.removeItem(atPath: file)
            logger.notice(
                "carried this node's record of the shared store over",
                metadata: ["from": "\(file)", "credentials": "\(saved.floors.count)"])
        } catch {
            logger.error("cannot carry \(file) over: \(error)")
        }
    }

    /// A generation counter behind the newest floor means the database was restored from an
    /// older copy: the floors are kept (rows changed since the copy are refused as rolled back,
    /// which is what a restore by an attacker looks like too) and the problem logged.
    func checkCounter() async throws {
        guard !isHeld, let newest = memory.highestGeneration() else { return }
        let logger = logger
        let counter: Int64 = try await run("read the shared store's generation counter") { client in
            for try await value in try await client.query("SELECT last_value FROM tokend_generation", logger: logger).decode(Int64.self) {
                return value
            }
            return 0
        }
        guard counter < newest else { return }
        let problem =
            "the shared store's generation counter (\(counter)) is behind the newest generation this node has seen (\(newest)): it was "
            + "restored from an older copy; rows changed since are refused as rolled back. After a restore on purpose, run "
            + "`tokenctl store adopt --restored` on every node"
        logger.error("\(problem)")
    }
}

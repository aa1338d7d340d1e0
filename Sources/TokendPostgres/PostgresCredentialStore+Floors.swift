import Logging
import PostgresNIO
import TokendStorage

extension PostgresCredentialStore {
    /// Reads the floors this node saved before it stopped (``GenerationFloors``) and adopts them
    /// if they were seen in this store. Called once, after the schema is up to date.
    func loadGenerationFloors() async throws {
        guard let file = settings.generationsFile else { return }
        let logger = logger
        let (storeID, counter): (String, Int64) = try await run("read the shared store's id") { client in
            try await client.query(
                """
                INSERT INTO tokend_meta (key, value) VALUES ('store_id', md5(random()::text || clock_timestamp()::text))
                ON CONFLICT (key) DO NOTHING
                """, logger: logger
            ).collect()
            var id = ""
            for try await value in try await client.query("SELECT value FROM tokend_meta WHERE key = 'store_id'", logger: logger)
                .decode(String.self)
            {
                id = value
            }
            var counter: Int64 = 0
            for try await value in try await client.query("SELECT last_value FROM tokend_generation", logger: logger).decode(Int64.self) {
                counter = value
            }
            return (id, counter)
        }
        var saved: GenerationFloors?
        do {
            if let bytes = try StateFile.read(file) {
                saved = GenerationFloors.decoded(bytes)
                if saved == nil { logger.error("\(file) cannot be read as a record of generations; it is replaced") }
            }
        } catch let error as StorageError {
            logger.error("\(error.message)")
        }
        generationFloorsStore.withLock { $0 = storeID }
        switch GenerationFloors.decide(saved: saved, storeID: storeID, counter: counter, file: file) {
        case .adopt(let floors, let restored):
            persistedFloors.withLock { $0 = floors }
            if let restored { logger.error("\(restored)") }
        case .discard(let problem):
            if let problem { logger.error("\(problem)") }
        }
    }

    /// Writes the newest generations seen to the node's file when they changed since the last
    /// write: at every reconciliation and when the store closes. A failure is logged; the
    /// floors in memory still apply.
    func saveGenerationFloors() {
        guard let file = settings.generationsFile, let storeID = generationFloorsStore.withLock({ $0 }) else { return }
        let floors = seenGenerations()
        let changed = savedFloors.withLock { saved in
            defer { saved = floors }
            return saved != floors
        }
        guard changed else { return }
        do {
            try StateFile.replace(file, with: try GenerationFloors(store: storeID, floors: floors).encoded())
        } catch {
            savedFloors.withLock { $0 = nil }
            logger.error("cannot save the generations this node has seen", metadata: ["file": "\(file)", "problem": "\(error)"])
        }
    }
}

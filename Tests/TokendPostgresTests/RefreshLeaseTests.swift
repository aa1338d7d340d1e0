import Logging
import Synchronization
import Testing
import TokendCore
import TokendPostgres
import TokendStorage
import TokendTestSupport

/// Leases, fencing, change notifications and the unavailable database, against a real server.
@Suite(.serialized, .enabled(if: PostgresServer.isAvailable, "needs PostgreSQL 15 (scripts/setup-host.sh) and root"))
struct RefreshLeaseTests {
    func coordination(_ store: PostgresCredentialStore) -> PostgresRefreshCoordination {
        PostgresRefreshCoordination(store: store, logger: Logger(label: "test"))
    }

    @Test func oneHolderAtATimeWithGrowingFencing() async throws {
        try await withServer { server in
            let a = coordination(try await Fixture.open(server, node: "a"))
            let b = coordination(try await Fixture.open(server, node: "b"))
            guard case .granted(let first) = await a.acquireLease("alice") else {
                Issue.record("a got no lease")
                return
            }
            #expect(first.holder == "a")
            guard case .heldElsewhere(let holder, let expiresAt) = await b.acquireLease("alice") else {
                Issue.record("b got the lease too")
                return
            }
            #expect(holder == "a")
            #expect(expiresAt == first.expiresAt)
            // Nor may a take it twice (a second grant on the same node waits like any other).
            guard case .heldElsewhere = await a.acquireLease("alice") else {
                Issue.record("a got it twice")
                return
            }
            // Other credentials are independent.
            guard case .granted = await b.acquireLease("bob") else {
                Issue.record("bob's lease was blocked")
                return
            }
            await a.releaseLease(first)
            guard case .granted(let second) = await b.acquireLease("alice") else {
                Issue.record("b got no lease after release")
                return
            }
            #expect(second.fencing > first.fencing)
            #expect(try await server.psql("SELECT holder FROM tokend_leases WHERE user_identifier = 'alice'") == "b")
            try await a.store.close()
            try await b.store.close()
        }
    }

    @Test func manyNodesRacingForOneLeaseGetExactlyOne() async throws {
        try await withServer { server in
            var nodes: [PostgresRefreshCoordination] = []
            for index in 0..<6 { nodes.append(coordination(try await Fixture.open(server, node: "n\(index)"))) }
            let granted = await withTaskGroup(of: Bool.self) { group in
                for node in nodes {
                    group.addTask {
                        if case .granted = await node.acquireLease("alice") { return true }
                        return false
                    }
                }
                return await group.reduce(0) { $0 + ($1 ? 1 : 0) }
            }
            #expect(granted == 1)
            for node in nodes { try await node.store.close() }
        }
    }

    @Test func aStaleHolderNeverOverwritesTheNewHoldersToken() async throws {
        try await withServer { server in
            let aStore = try await Fixture.open(server, node: "a", leaseMilliseconds: 1_000)
            let bStore = try await Fixture.open(server, node: "b", leaseMilliseconds: 1_000)
            let a = coordination(aStore)
            let b = coordination(bStore)
            let stored = try await aStore.insert(Fixture.credential("alice", access: "v1"), replacing: false)
            guard case .granted = await a.acquireLease("alice") else {
                Issue.record("a got no lease")
                return
            }
            // a stalls past its lease; b takes over.
            try await Task.sleep(for: .milliseconds(1_300))
            guard case .granted = await b.acquireLease("alice") else {
                Issue.record("b could not take over an expired lease")
                return
            }
            // a's write, even with the right generation, is fenced off.
            var stale = stored
            stale.accessToken = SecretString("v2-from-stale-a")
            await #expect(throws: StorageError(code: .conflict, message: "")) {
                try await aStore.update(stale, expectedGeneration: stored.generation)
            }
            var fresh = stored
            fresh.accessToken = SecretString("v2-from-b")
            _ = try await bStore.update(fresh, expectedGeneration: stored.generation)
            #expect(try await aStore.load(userIdentifier: "alice")?.accessToken.value == "v2-from-b")
            try await aStore.close()
            try await bStore.close()
        }
    }

    @Test func changesReachOtherNodesAndWakeWaiters() async throws {
        try await withServer { server in
            let writer = try await Fixture.open(server, node: "writer")
            let reader = coordination(try await Fixture.open(server, node: "reader"))
            let seen = Mutex<[String]>([])
            let reconciled = Mutex(0)
            let feed = Task {
                await reader.run(
                    handlers: ChangeHandlers(
                        credentialChanged: { user, generation in
                            seen.withLock { $0.append("\(user) \(generation.map(String.init) ?? "removed")") }
                        },
                        reconcile: { _ in reconciled.withLock { $0 += 1 } }
                    ))
            }
            // Wait until the listener is up (its first reconciliation).
            for _ in 0..<200 where reconciled.withLock({ $0 }) == 0 { try await Task.sleep(for: .milliseconds(25)) }
            #expect(reconciled.withLock { $0 } > 0)
            let stored = try await writer.insert(Fixture.credential("alice"), replacing: false)
            let writerLeases = coordination(writer)
            guard case .granted(let lease) = await writerLeases.acquireLease("alice") else {
                Issue.record("no lease")
                return
            }
            // The reader learns who holds the lease.
            for _ in 0..<200 where reader.leaseHolders()["alice"] == nil { try await Task.sleep(for: .milliseconds(25)) }
            #expect(reader.leaseHolders()["alice"]?.holder == "writer")
            // A waiter on the reader wakes when the writer's result arrives, not at its deadline.
            let started = ContinuousClock.now
            async let waited: Void = reader.waitForChange(of: "alice", until: Timestamp.now() + .seconds(20))
            try await Task.sleep(for: .milliseconds(100))
            var next = stored
            next.accessToken = SecretString("refreshed")
            let updated = try await writer.update(next, expectedGeneration: stored.generation)
            await writerLeases.releaseLease(lease)
            await waited
            #expect(ContinuousClock.now - started < .seconds(15))
            _ = try await writer.remove(userIdentifier: "alice")
            for _ in 0..<200 where seen.withLock({ $0.count }) < 3 { try await Task.sleep(for: .milliseconds(25)) }
            #expect(seen.withLock { $0 } == ["alice \(stored.generation)", "alice \(updated.generation)", "alice removed"])
            #expect(reader.nodes().contains("writer"))
            feed.cancel()
            await feed.value
            try await writer.close()
            try await reader.store.close()
        }
    }

    @Test func aDatabaseThatIsDownIsReportedAndRecovered() async throws {
        try await withServer { server in
            let store = try await Fixture.open(server, node: "a")
            let leases = coordination(store)
            _ = try await store.insert(Fixture.credential("alice"), replacing: false)
            #expect(leases.health().isAvailable)
            try await server.stop()
            await #expect(throws: StorageError(code: .database, message: "")) { try await store.load(userIdentifier: "alice") }
            #expect(!leases.health().isAvailable)
            guard case .unavailable(let reason) = await leases.acquireLease("alice") else {
                Issue.record("a lease without a database")
                return
            }
            #expect(!reason.contains(PostgresServer.password))
            try await server.start()
            var loaded: Credential?
            for _ in 0..<40 where loaded == nil {
                loaded = try? await store.load(userIdentifier: "alice")
                if loaded == nil { try await Task.sleep(for: .milliseconds(250)) }
            }
            #expect(loaded != nil)
            #expect(leases.health().isAvailable)
            try await store.close()
        }
    }
}

extension Timestamp {
    static func now() -> Timestamp { SQLiteCredentialStore.systemNow() }
}

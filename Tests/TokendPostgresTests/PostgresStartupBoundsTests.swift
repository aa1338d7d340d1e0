import Testing
import TokendStorage
import TokendTestSupport

@testable import TokendPostgres

/// How long a node's start-up may wait on the shared store: for another node's migration, longer
/// than one operation may take; for a database that is down, no longer than one operation.
@Suite(.serialized, .enabled(if: PostgresServer.isAvailable, "needs PostgreSQL 15 (scripts/setup-host.sh) and root"))
struct PostgresStartupBoundsTests {
    /// Another node holds the migration lock for 10 s; this node, with the default operation
    /// timeout (5 s), waits for it and opens instead of failing with "did not answer within 5s".
    @Test func aNodeWaitsForAnotherNodesMigrationLongerThanOneOperation() async throws {
        try await withServer { server in
            let holder = Task {
                try await server.psql("SELECT pg_advisory_xact_lock(\(PostgresCredentialStore.migrationLockKey)); SELECT pg_sleep(10)")
            }
            var held = false
            for _ in 0..<300 where !held {
                held = try await server.psql("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted") == "1"
                if !held { try await Task.sleep(for: .milliseconds(50)) }
            }
            try #require(held, "the other node's lock was not taken")
            var settings = Fixture.settings(server, node: "late")
            settings.operationTimeoutMilliseconds = 5_000
            let store = try await PostgresCredentialStore.open(settings: settings, keyring: Fixture.keyring)
            _ = try await holder.value
            #expect(try await server.psql("SELECT applied_by FROM tokend_schema ORDER BY version LIMIT 1") == "late")
            try await store.close()
        }
    }

    /// Nothing listens at the store's address: start-up fails with the outage, bounded by the
    /// operation timeout rather than by the migration's two minutes.
    @Test func aDatabaseThatIsDownIsReportedWithoutWaitingForTheMigrationBound() async throws {
        let settings = PostgresStoreSettings(
            url: "postgresql://postgres@127.0.0.1:\(try FreePort.pick())/postgres", password: "unused", leaseMilliseconds: 30_000,
            nodeName: "down", reconcileMilliseconds: 500, operationTimeoutMilliseconds: 2_000)
        let started = ContinuousClock.now
        let error = await #expect(throws: StorageError.self) {
            try await PostgresCredentialStore.open(settings: settings, keyring: Fixture.keyring)
        }
        let message = error?.message ?? ""
        #expect(message.contains("cannot connect to the shared store's database: the database is unreachable"), "\(message)")
        // Bounded, not timed: far below the migration's 120 s.
        #expect(ContinuousClock.now - started < .seconds(60))
    }
}

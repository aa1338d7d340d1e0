import Testing
import TokendCore
import TokendStorage
import TokendTestSupport

@testable import TokendPostgres

/// The re-login columns of the shared store (issue 31): stored, loaded, in the start-up index,
/// authenticated when set; rows written before them keep working.
@Suite(.serialized, .enabled(if: PostgresServer.isAvailable, "needs PostgreSQL 15 (scripts/setup-host.sh) and root"))
struct PostgresReloginColumnsTests {
    @Test func theRecordAndTheRefreshTokensExpiryAreStoredAndAuthenticated() async throws {
        try await withServer { server in
            let store = try await Fixture.open(server, node: "a")
            var alice = Fixture.credential("alice")
            alice.refreshTokenExpiresAt = Timestamp(millisecondsSince1970: 1_700_000_900_000)
            alice.reloginWarnings = ReloginWarningRecord(reloginBy: 1_700_000_900, said: [30_000, 10_000])
            _ = try await store.insert(alice, replacing: false)
            _ = try await store.insert(Fixture.credential("bob"), replacing: false)
            let loaded = try #require(try await store.load(userIdentifier: "alice"))
            #expect(loaded.refreshTokenExpiresAt == alice.refreshTokenExpiresAt)
            #expect(loaded.reloginWarnings == alice.reloginWarnings)
            #expect(try await store.load(userIdentifier: "bob")?.reloginWarnings == nil)
            let index = try await store.loadIndex()
            #expect(index.first { $0.metadata.userIdentifier == "alice" }?.metadata.reloginWarnings == alice.reloginWarnings)
            // Another node sees what one recorded.
            let other = try await Fixture.open(server, node: "b")
            var next = loaded
            next.reloginWarnings = ReloginWarningRecord(reloginBy: 1_700_000_900, said: [30_000, 10_000, 5_000])
            _ = try await store.update(next, expectedGeneration: loaded.generation)
            #expect(try await other.load(userIdentifier: "alice")?.reloginWarnings?.said.count == 3)
            // Edited with SQL: refused like any other edit.
            try await server.psql("UPDATE tokend_credentials SET relogin_warnings = '1:' WHERE user_identifier = 'alice'")
            await #expect(throws: StorageError.self) { try await store.load(userIdentifier: "alice") }
            try await other.close()
            try await store.close()
        }
    }
}

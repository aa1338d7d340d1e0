import Logging
import Synchronization
import Testing
import TokendCore
import TokendStorage
import TokendTestSupport

@testable import TokendPostgres

/// Rows of the shared store edited, copied or rolled back with SQL, outside tokend: every one
/// is refused with `.integrity`, reported, and left out of the start-up index. Writes that
/// depend on a row check it in the same statement.
@Suite(.serialized, .enabled(if: PostgresServer.isAvailable, "needs PostgreSQL 15 (scripts/setup-host.sh) and root"))
struct PostgresRowIntegrityTests {
    /// Integrity reports, collected.
    final class Reports: Sendable {
        private let kinds = Mutex<[IntegrityFailure]>([])
        func append(_ kind: IntegrityFailure) { kinds.withLock { $0.append(kind) } }
        func withLock<T>(_ body: ([IntegrityFailure]) -> T) -> T { kinds.withLock { body($0) } }
    }

    /// A store whose integrity reports are collected.
    static func observed(_ server: PostgresServer, node: String) async throws -> (PostgresCredentialStore, Reports) {
        let store = try await Fixture.open(server, node: node)
        let reports = Reports()
        store.onIntegrityFailure { kind in reports.append(kind) }
        return (store, reports)
    }

    /// Each edit an attacker with write access to the table might make, as SQL on alice's row.
    static let edits: [(column: String, sql: String)] = [
        ("readers", #"SET readers = '["uid:1000","uid:7001"]'"#),
        ("enrolled_uid", "SET enrolled_uid = 7001"),
        ("state", "SET state = 'refreshing', grant_started_at = 1"),
        ("scope", "SET scope = 'read write admin'"),
        ("token_type", "SET token_type = 'DPoP'"),
        ("provider", "SET provider = 'other'"),
        ("expires_at", "SET expires_at = expires_at + 86400000"),
        ("generation", "SET generation = nextval('tokend_generation')"),
        ("access_token", "SET access_token = (SELECT access_token FROM tokend_credentials WHERE user_identifier = 'bob')"),
        (
            "whole row from bob",
            """
            SET (provider, salt, access_token, refresh_token, token_type, scope, expires_at, issued_at, session_started_at, readers,
                 enrolled_uid, enrolled_pid, enrolled_at, state, generation, row_mac)
              = (SELECT provider, salt, access_token, refresh_token, token_type, scope, expires_at, issued_at, session_started_at,
                 readers, enrolled_uid, enrolled_pid, enrolled_at, state, generation, row_mac
                 FROM tokend_credentials WHERE user_identifier = 'bob')
            """
        ),
        ("row_mac removed", "SET row_mac = NULL"),
    ]

    @Test func aRowEditedWithSQLIsRefusedAndReported() async throws {
        try await withServer { server in
            let (store, reports) = try await Self.observed(server, node: "a")
            for (index, edit) in Self.edits.enumerated() {
                let alice = "alice-\(index)"
                _ = try await store.insert(Fixture.credential(alice), replacing: true)
                _ = try await store.insert(Fixture.credential("bob"), replacing: true)
                #expect(try await store.load(userIdentifier: alice) != nil)
                try await server.psql("UPDATE tokend_credentials \(edit.sql) WHERE user_identifier = '\(alice)'")
                let error = await #expect(throws: StorageError.self, "\(edit.column)") { try await store.load(userIdentifier: alice) }
                #expect(error?.code == .integrity, "\(edit.column): \(String(describing: error))")
                // Start-up leaves it out and serves the others.
                let index = try await store.loadIndex().map(\.metadata.userIdentifier)
                #expect(!index.contains(alice) && index.contains("bob"), "\(edit.column): \(index)")
                #expect(reports.withLock { $0.last } == .altered, "\(edit.column)")
                try await server.psql("DELETE FROM tokend_credentials WHERE user_identifier = '\(alice)'")
            }
            // A fresh node refuses them too: the tag needs the master key, not memory.
            _ = try await store.insert(Fixture.credential("carol"), replacing: false)
            try await server.psql(#"UPDATE tokend_credentials SET readers = '["uid:7001"]' WHERE user_identifier = 'carol'"#)
            let (fresh, freshReports) = try await Self.observed(server, node: "b")
            #expect(try await fresh.loadIndex().map(\.metadata.userIdentifier).sorted() == ["bob"])
            #expect(freshReports.withLock { $0 } == [.altered])
            try await fresh.close()
            try await store.close()
        }
    }

    /// An old copy of a row written back: refused and reported once by the node that saw the
    /// newer one (on read and at reconciliation). A node that never saw the newer row cannot
    /// tell (the documented limit).
    @Test func aRowRolledBackIsRefusedByANodeThatSawANewerOne() async throws {
        try await withServer { server in
            let (store, reports) = try await Self.observed(server, node: "a")
            let first = try await store.insert(Fixture.credential("alice", access: "first"), replacing: false)
            try await server.psql("CREATE TABLE saved AS SELECT * FROM tokend_credentials")
            var next = first
            next.readers = [.uid(1000)]
            _ = try await store.update(next, expectedGeneration: first.generation)
            try await server.psql(
                "DELETE FROM tokend_credentials WHERE user_identifier = 'alice'; INSERT INTO tokend_credentials SELECT * FROM saved")
            let error = await #expect(throws: StorageError.self) { try await store.load(userIdentifier: "alice") }
            #expect(error?.code == .integrity)
            #expect(error?.message.contains("rolled back") == true)
            #expect(try await store.loadIndex().isEmpty)
            _ = try await store.generations()
            #expect(reports.withLock { $0 } == [.rolledBack], "reported once per row version")
            // A write that read the newer row does not overwrite the old one.
            await #expect(throws: StorageError(code: .conflict, message: "")) {
                try await store.update(next, expectedGeneration: first.generation + 1)
            }
            let (fresh, freshReports) = try await Self.observed(server, node: "b")
            #expect(try await fresh.load(userIdentifier: "alice")?.accessToken.value == "first")
            #expect(freshReports.withLock { $0 }.isEmpty)
            try await fresh.close()
            try await store.close()
        }
    }

    /// The old row is written back while the node is stopped: started again, the node still
    /// refuses it, from the generations it keeps in its state directory. With the store's id
    /// changed the node serves none of the store until an administrator adopts it, and then the
    /// rows, tagged for the id it had, are refused as another store's.
    @Test func aRowRolledBackWhileTheNodeWasDownIsRefusedWhenItStartsAgain() async throws {
        try await withServer { server in
            var settings = Fixture.settings(server, node: "a")
            settings.stateDirectory = server.directory
            let store = try await PostgresCredentialStore.open(
                settings: settings, keyring: Fixture.keyring, logger: Logger(label: "test.a"))
            let first = try await store.insert(Fixture.credential("alice", access: "first"), replacing: false)
            try await server.psql("CREATE TABLE saved AS SELECT * FROM tokend_credentials")
            var next = first
            next.readers = [.uid(1000)]
            _ = try await store.update(next, expectedGeneration: first.generation)
            try await store.close()
            try await server.psql(
                "DELETE FROM tokend_credentials WHERE user_identifier = 'alice'; INSERT INTO tokend_credentials SELECT * FROM saved")

            let restarted = try await PostgresCredentialStore.open(
                settings: settings, keyring: Fixture.keyring, logger: Logger(label: "test.a"))
            let reports = Reports()
            restarted.onIntegrityFailure { kind in reports.append(kind) }
            let error = await #expect(throws: StorageError.self) { try await restarted.load(userIdentifier: "alice") }
            #expect(error?.code == .integrity)
            #expect(error?.message.contains("rolled back") == true)
            #expect(reports.withLock { $0 } == [.rolledBack])
            try await restarted.close()

            let id = try await server.psql("SELECT value FROM tokend_meta WHERE key = 'store_id'")
            try await server.psql("UPDATE tokend_meta SET value = 'another store' WHERE key = 'store_id'")
            let elsewhere = try await PostgresCredentialStore.open(
                settings: settings, keyring: Fixture.keyring, logger: Logger(label: "test.a"))
            #expect(elsewhere.health.problem?.contains("this node served store \(id)") == true)
            #expect(try await elsewhere.load(userIdentifier: "alice") == nil)
            #expect(try await elsewhere.loadIndex().isEmpty)
            await #expect(throws: StorageError.self) { try await elsewhere.insert(Fixture.credential("bob"), replacing: false) }
            let adopted = try await elsewhere.adopt(StoreAdoptionRequest())
            #expect(adopted.storeID == "another store" && adopted.recordedStoreID == id)
            #expect(adopted.refused.map(\.userIdentifier) == ["alice"])
            #expect(adopted.refused.first?.problem?.contains("tagged for store \(id)") == true, "\(adopted.refused)")
            #expect(elsewhere.health.problem == nil)
            await #expect(throws: StorageError.self) { try await elsewhere.load(userIdentifier: "alice") }
            try await elsewhere.close()
        }
    }

    /// A status-only write on a node that has not read the row authenticates it from a fresh,
    /// checked read; another node then reads the result.
    @Test func aStatusWriteFromAnotherNodeKeepsTheRowAuthentic() async throws {
        try await withServer { server in
            let a = try await Fixture.open(server, node: "a")
            let b = try await Fixture.open(server, node: "b")
            let alice = try await a.insert(Fixture.credential("alice"), replacing: false)
            var status = alice.status
            status.state = .refreshing
            let marked = try await b.updateStatus(userIdentifier: "alice", status: status, expectedGeneration: alice.generation)
            #expect(try await a.load(userIdentifier: "alice")?.status.state == .refreshing)
            status.state = .valid
            _ = try await b.updateStatus(userIdentifier: "alice", status: status, expectedGeneration: marked)
            #expect(try await a.load(userIdentifier: "alice")?.status.state == .valid)
            // A status write over an edited row fails and does not bless it.
            let current = try #require(try await a.load(userIdentifier: "alice"))
            try await server.psql(#"UPDATE tokend_credentials SET readers = '["uid:7001"]' WHERE user_identifier = 'alice'"#)
            let c = try await Fixture.open(server, node: "c")
            await #expect(throws: StorageError.self) {
                try await c.updateStatus(userIdentifier: "alice", status: status, expectedGeneration: current.generation)
            }
            // The node that knew the row writes a tag over the content it knew: still refused.
            _ = try? await a.updateStatus(userIdentifier: "alice", status: status, expectedGeneration: current.generation)
            await #expect(throws: StorageError.self) { try await c.load(userIdentifier: "alice") }
            for store in [a, b, c] { try await store.close() }
        }
    }

    /// Key rotation re-seals a row without a new generation: a node that read the row before
    /// cannot tag a status write over the content it remembers (the salt changed); it gets a
    /// conflict, and the row stays authentic for every node.
    @Test func aStatusWriteAfterAnotherNodesRotationConflictsInsteadOfBreakingTheRow() async throws {
        try await withServer { server in
            // Every node has the new key file; node a re-seals.
            let newKeys = Keyring(current: MasterKey.generate(), older: [Fixture.keyring.current])
            let a = try await Fixture.open(server, node: "a")
            let b = try await Fixture.open(server, node: "b", keyring: newKeys)
            let alice = try await a.insert(Fixture.credential("alice"), replacing: false)
            #expect(try await b.load(userIdentifier: "alice") != nil)
            #expect(try await a.reencrypt(under: newKeys) == 1)
            var status = alice.status
            status.state = .refreshing
            await #expect(throws: StorageError(code: .conflict, message: "")) {
                try await b.updateStatus(userIdentifier: "alice", status: status, expectedGeneration: alice.generation)
            }
            #expect(try await a.load(userIdentifier: "alice")?.status.state == .valid)
            let reread = try #require(try await b.load(userIdentifier: "alice"))
            _ = try await b.updateStatus(userIdentifier: "alice", status: status, expectedGeneration: reread.generation)
            #expect(try await a.load(userIdentifier: "alice")?.status.state == .refreshing)
            for store in [a, b] { try await store.close() }
        }
    }

    /// Add, replace and remove with the row the caller checked: a stale view (nothing, or an
    /// older generation) writes nothing, and the row stays as it is.
    @Test func conditionalWritesCheckTheStoredRowInTheSameStatement() async throws {
        try await withServer { server in
            let store = try await Fixture.open(server, node: "a")
            let victim = try await store.insert(Fixture.credential("victim", access: "victims"), replacing: false)
            for replacing in [true, false] {
                await #expect(throws: StorageError(code: .conflict, message: "")) {
                    try await store.insert(Fixture.credential("victim", access: "attackers"), replacing: replacing, expecting: .absent)
                }
            }
            await #expect(throws: StorageError(code: .conflict, message: "")) {
                try await store.insert(
                    Fixture.credential("victim", access: "attackers"), replacing: true, expecting: .generation(victim.generation - 1))
            }
            await #expect(throws: StorageError(code: .conflict, message: "")) {
                try await store.remove(userIdentifier: "victim", expectedGeneration: victim.generation - 1)
            }
            #expect(try await store.load(userIdentifier: "victim")?.accessToken.value == "victims")
            let replaced = try await store.insert(
                Fixture.credential("victim", access: "admins"), replacing: true, expecting: .generation(victim.generation))
            #expect(replaced.generation > victim.generation)
            #expect(try await store.remove(userIdentifier: "victim", expectedGeneration: replaced.generation))
            #expect(try await !store.remove(userIdentifier: "victim", expectedGeneration: replaced.generation))
            let fresh = try await store.insert(Fixture.credential("victim"), replacing: false, expecting: .absent)
            #expect(fresh.generation > replaced.generation)
            try await store.close()
        }
    }

    /// alice's and bob's rows in a store at schema 3, as a build from before row tags left it.
    static func storeFromBeforeRowTags(_ server: PostgresServer) async throws {
        let store = try await Fixture.open(server, node: "a")
        _ = try await store.insert(Fixture.credential("alice", access: "kept"), replacing: false)
        _ = try await store.insert(Fixture.credential("bob"), replacing: false)
        try await store.close()
        try await server.psql(
            """
            ALTER TABLE tokend_credentials DROP COLUMN row_mac, DROP COLUMN refresh_token_expires_at, DROP COLUMN relogin_warnings;
            DELETE FROM tokend_schema WHERE version >= 4
            """)
    }

    /// A store written before rows were authenticated (schema 3): a node migrates its schema
    /// but tags none of its rows; they are refused until an administrator adopts them, which
    /// lists them (a dry run changes nothing) and tags them as the dry run showed them.
    @Test func rowsStoredBeforeAuthenticationAreTaggedOnlyByAnAdministrator() async throws {
        try await withServer { server in
            try await Self.storeFromBeforeRowTags(server)
            let upgraded = try await Fixture.open(server, node: "b")
            #expect(try await server.psql("SELECT count(*) FROM tokend_credentials WHERE row_mac IS NOT NULL") == "0")
            await #expect(throws: StorageError.self) { try await upgraded.load(userIdentifier: "alice") }
            #expect(try await upgraded.loadIndex().isEmpty)
            let preview = try await upgraded.adopt(StoreAdoptionRequest(dryRun: true))
            #expect(preview.tagged.map(\.userIdentifier) == ["alice", "bob"])
            #expect(preview.tagged.first?.readers == ["uid:1000", "group:backup"])
            #expect(try await server.psql("SELECT count(*) FROM tokend_credentials WHERE row_mac IS NOT NULL") == "0")
            let adopted = try await upgraded.adopt(StoreAdoptionRequest())
            #expect(adopted.tagged.count == 2 && adopted.credentials == 2)
            #expect(try await upgraded.load(userIdentifier: "alice")?.accessToken.value == "kept")
            #expect(try await upgraded.loadIndex().count == 2)
            // From then on an edit is refused.
            try await server.psql(#"UPDATE tokend_credentials SET readers = '["uid:7001"]' WHERE user_identifier = 'bob'"#)
            await #expect(throws: StorageError.self) { try await upgraded.load(userIdentifier: "bob") }
            try await upgraded.close()
        }
    }
}

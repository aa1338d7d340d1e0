import Logging
import Synchronization
import Testing
import TokendCore
import TokendPostgres
import TokendStorage
import TokendTestSupport

/// The store against a real PostgreSQL 15: the CredentialStore contract, encryption at rest,
/// migrations from several nodes at once.
@Suite(.serialized, .enabled(if: PostgresServer.isAvailable, "needs PostgreSQL 15 (scripts/setup-host.sh) and root"))
struct PostgresCredentialStoreTests {
    @Test func migratesOnceWhenSeveralNodesStartAtOnce() async throws {
        try await withServer { server in
            let stores = try await withThrowingTaskGroup(of: PostgresCredentialStore.self) { group in
                for index in 0..<5 { group.addTask { try await Fixture.open(server, node: "node-\(index)") } }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(stores.count == 5)
            #expect(try await server.psql("SELECT count(*) FROM tokend_schema") == "\(PostgresCredentialStore.schemaVersion)")
            #expect(try await server.psql("SELECT count(*) FROM tokend_nodes") == "5")
            // One store, one id.
            #expect(try await server.psql("SELECT count(*) FROM tokend_meta WHERE key = 'store_id'") == "1")
            // Reopening finds the work done.
            let again = try await Fixture.open(server, node: "node-0")
            #expect(try await server.psql("SELECT count(*) FROM tokend_schema") == "\(PostgresCredentialStore.schemaVersion)")
            for store in stores + [again] { try await store.close() }
        }
    }

    @Test func refusesASchemaFromANewerBuild() async throws {
        try await withServer { server in
            let store = try await Fixture.open(server, node: "a")
            try await store.close()
            try await server.psql("INSERT INTO tokend_schema (version, applied_by) VALUES (99, 'future')")
            let error = await #expect(throws: StorageError(code: .database, message: "")) { try await Fixture.open(server, node: "a") }
            #expect(error?.message.contains("newer than this build knows") == true, "\(String(describing: error))")
        }
    }

    @Test func storesLoadsAndComparesAndSwaps() async throws {
        try await withServer { server in
            let store = try await Fixture.open(server, node: "a")
            let alice = try await store.insert(Fixture.credential("alice", access: "alice-access-1"), replacing: false)
            let bob = try await store.insert(Fixture.credential("bob", refresh: nil), replacing: false)
            #expect(bob.generation > alice.generation)
            await #expect(throws: StorageError(code: .alreadyExists, message: "")) {
                try await store.insert(Fixture.credential("alice"), replacing: false)
            }
            let loaded = try #require(try await store.load(userIdentifier: "alice"))
            #expect(loaded == alice)
            #expect(try await store.load(userIdentifier: "nobody") == nil)
            #expect(try await store.loadAll().map(\.userIdentifier) == ["alice", "bob"])
            #expect(try await store.loadAll().last?.refreshToken == nil)

            var next = loaded
            next.accessToken = SecretString("alice-access-2")
            next.status.refreshCount = 1
            let updated = try await store.update(next, expectedGeneration: loaded.generation)
            #expect(updated.generation > bob.generation)
            // A writer that read the old generation loses.
            await #expect(throws: StorageError(code: .conflict, message: "")) {
                try await store.update(next, expectedGeneration: loaded.generation)
            }
            var status = updated.status
            status.state = .refreshing
            let marked = try await store.updateStatus(userIdentifier: "alice", status: status, expectedGeneration: updated.generation)
            #expect(marked > updated.generation)
            #expect(try await store.load(userIdentifier: "alice")?.accessToken.value == "alice-access-2")
            #expect(try await store.load(userIdentifier: "alice")?.status.state == .refreshing)
            await #expect(throws: StorageError(code: .notFound, message: "")) {
                try await store.updateStatus(userIdentifier: "nobody", status: status, expectedGeneration: 1)
            }
            // Generations keep growing across remove and re-insert.
            #expect(try await store.remove(userIdentifier: "alice"))
            #expect(try await !store.remove(userIdentifier: "alice"))
            let again = try await store.insert(Fixture.credential("alice"), replacing: false)
            #expect(again.generation > marked)
            let replaced = try await store.insert(Fixture.credential("alice", access: "alice-access-3"), replacing: true)
            #expect(replaced.generation > again.generation)
            #expect(try await store.generations() == ["alice": replaced.generation, "bob": bob.generation])
            try await store.close()
            await #expect(throws: StorageError(code: .closed, message: "")) { try await store.loadAll() }
        }
    }

    /// Several credentials in one read (a node applying other nodes' changes): those missing and
    /// those refused by their integrity check are left out; the others come back decrypted.
    /// A grant's read draws its next generation ahead; the write after it still gets a
    /// generation above the one it replaced, and a second writer of that generation still loses.
    @Test func loadsSeveralInOneReadAndLeavesOutMissingAndRefusedRows() async throws {
        try await withServer { server in
            let store = try await Fixture.open(server, node: "a")
            for user in ["alice", "bob", "carol"] {
                _ = try await store.insert(Fixture.credential(user, access: "\(user)-access"), replacing: false)
            }
            try await server.psql("UPDATE tokend_credentials SET row_mac = decode('00', 'hex') WHERE user_identifier = 'carol'")
            let reader = try await Fixture.open(server, node: "b")
            let loaded = try await reader.load(userIdentifiers: ["alice", "bob", "carol", "nobody"])
            #expect(loaded.map(\.userIdentifier).sorted() == ["alice", "bob"])
            #expect(loaded.first { $0.userIdentifier == "bob" }?.accessToken.value == "bob-access")
            await #expect(throws: StorageError(code: .integrity, message: "")) { try await reader.load(userIdentifier: "carol") }

            let read = try #require(try await reader.load(userIdentifier: "alice"))
            var next = read
            next.accessToken = SecretString("alice-access-2")
            let written = try await reader.update(next, expectedGeneration: read.generation)
            #expect(written.generation > read.generation)
            await #expect(throws: StorageError(code: .conflict, message: "")) {
                try await store.update(next, expectedGeneration: read.generation)
            }
            #expect(try await store.load(userIdentifier: "alice")?.accessToken.value == "alice-access-2")
            for each in [store, reader] { try await each.close() }
        }
    }

    @Test func tokensAreSealedAtRestAndNeedTheSameMasterKey() async throws {
        try await withServer { server in
            let store = try await Fixture.open(server, node: "a")
            var alice = Fixture.credential("alice", access: "plain-access-token-xyz", refresh: "plain-refresh-token-xyz")
            alice.dpopKey = SecretString("-----BEGIN PRIVATE KEY-----\nplain-dpop-key-xyz\n-----END PRIVATE KEY-----\n")
            alice.narrowedTokens = [
                NarrowedToken(
                    key: "read\u{1F}", scope: "read", resource: nil, accessToken: SecretString("plain-narrowed-token-xyz"),
                    tokenType: "Bearer",
                    issuedAt: Timestamp(millisecondsSince1970: 1_000), expiresAt: Timestamp(millisecondsSince1970: 3_601_000),
                    enrolledAt: Timestamp(millisecondsSince1970: 0))
            ]
            _ = try await store.insert(alice, replacing: false)
            let dump = try await server.psql(
                "SELECT encode(access_token, 'hex') || encode(refresh_token, 'hex') || encode(dpop_key, 'hex') || encode(narrowed_tokens, 'hex') FROM tokend_credentials"
            )
            let rawDump = try await server.psql(
                "SELECT access_token::text || refresh_token::text || dpop_key::text || narrowed_tokens::text FROM tokend_credentials")
            for secret in [
                "plain-access-token-xyz", "plain-refresh-token-xyz", "plain-dpop-key-xyz", "PRIVATE KEY", "plain-narrowed-token-xyz",
            ] {
                #expect(!dump.contains(secret) && !rawDump.contains(secret))
                let hex = secret.utf8.map { String($0, radix: 16) }.joined()
                #expect(!dump.contains(hex))
            }
            #expect(try await store.keyIDsInUse() == [Fixture.keyring.current.id])
            // Another node with the same key reads it; one with another key cannot.
            let other = try await Fixture.open(server, node: "b")
            #expect(try await other.load(userIdentifier: "alice")?.refreshToken?.value == "plain-refresh-token-xyz")
            #expect(try await other.load(userIdentifier: "alice")?.dpopKey == alice.dpopKey, "the DPoP key travels sealed with the tokens")
            #expect(try await other.load(userIdentifier: "alice")?.narrowedTokens == alice.narrowedTokens, "and so do narrowed tokens")
            let stranger = try await Fixture.open(server, node: "c", keyring: Keyring(current: MasterKey.generate()))
            await #expect(throws: StorageError(code: .unknownKey, message: "")) { try await stranger.load(userIdentifier: "alice") }
            // Rotation re-seals under the new key without changing generations.
            let before = try await store.generations()
            let newKeys = Keyring(current: MasterKey.generate(), older: [Fixture.keyring.current])
            #expect(try await store.reencrypt(under: newKeys) == 1)
            #expect(try await store.keyIDsInUse() == [newKeys.current.id])
            #expect(try await store.generations() == before)
            #expect(try await store.load(userIdentifier: "alice")?.accessToken.value == "plain-access-token-xyz")
            #expect(try await store.load(userIdentifier: "alice")?.dpopKey == alice.dpopKey)
            #expect(try await store.load(userIdentifier: "alice")?.narrowedTokens == alice.narrowedTokens)
            for each in [store, other, stranger] { try await each.close() }
        }
    }

    @Test func theWrongPasswordIsRefusedWithoutEchoingIt() async throws {
        try await withServer { server in
            var settings = Fixture.settings(server, node: "a")
            settings.password = "not-the-password-123"
            do {
                _ = try await PostgresCredentialStore.open(settings: settings, keyring: Fixture.keyring)
                Issue.record("opened with a wrong password")
            } catch let error as StorageError {
                #expect(error.code == .database)
                // The server's own refusal, not a timeout (the pool alone retries a refused login).
                #expect(error.description.contains("password authentication failed"), "\(error)")
                #expect(!error.description.contains("not-the-password-123"))
                #expect(!error.description.contains(PostgresServer.password))
            }
        }
    }
}

import NIOCore
import PostgresNIO
import Testing
import TokendCore
import TokendStorage
import TokendTestSupport

@testable import TokendPostgres

/// A node's reads of the whole store (start-up, reconciliation, the keys in use): bounded page by
/// page, however large the store, and tokens opened only when asked for.
@Suite(.serialized, .enabled(if: PostgresServer.isAvailable, "needs PostgreSQL 15 (scripts/setup-host.sh) and root"))
struct PostgresStartupLoadTests {
    /// Makes every read of `tokend_credentials` sleep 1 ms per row it returns, as a large store
    /// on a busy server takes long to read: the table becomes a view over the rows.
    static func slowDownReads(_ server: PostgresServer) async throws {
        try await server.psql(
            """
            ALTER TABLE tokend_credentials RENAME TO tokend_credentials_rows;
            CREATE FUNCTION tokend_test_slow() RETURNS boolean LANGUAGE sql VOLATILE AS $$ SELECT pg_sleep(0.001) IS NOT NULL $$;
            CREATE VIEW tokend_credentials AS SELECT * FROM tokend_credentials_rows WHERE tokend_test_slow();
            """)
    }

    /// 3,000 credentials read at 1 ms each take at least 3 s, twice the operation timeout; 100 of
    /// them, a page, take a tenth of a second. The node loads every one, reconciles and lists
    /// the keys in use instead of failing with "the database did not answer within 1.5s".
    @Test func aStoreThatTakesLongerThanOneOperationToReadLoadsPageByPage() async throws {
        try await withServer { server in
            let writer = try await Fixture.open(server, node: "writer")
            let users = (0..<3_000).map { "user\(100_000 + $0)" }
            try await writer.insertBulk(users.map { Fixture.credential($0) })
            try await writer.close()
            try await Self.slowDownReads(server)
            var settings = Fixture.settings(server, node: "reader")
            settings.operationTimeoutMilliseconds = 1_500
            settings.readPageSize = 100
            let store = try await PostgresCredentialStore.open(settings: settings, keyring: Fixture.keyring)
            let loaded = try await store.loadIndex()
            #expect(loaded.map(\.metadata.userIdentifier).sorted() == users)
            #expect(try await store.generations().count == users.count)
            #expect(try await store.keyIDsInUse() == [Fixture.keyring.current.id])
            try await store.close()
        }
    }

    /// Re-tags `user`'s row as it stands now, as tokend would: a row whose tag checks out.
    static func retag(_ user: String, store: PostgresCredentialStore) async throws {
        try await store.client.withConnection { connection in
            var query = PostgresQuery(
                unsafeSQL: "SELECT \(PostgresCredentialStore.selectColumns) FROM tokend_credentials WHERE user_identifier = $1")
            try query.binds.append(user)
            var tag: [UInt8] = []
            for try await row in try await connection.query(query, logger: store.logger) {
                let stored = try PostgresCredentialStore.authenticity(of: row)
                tag = stored.authenticity.tag(store: store.storeID, user, generation: stored.generation, keyring: Fixture.keyring)
            }
            try await connection.query(
                "UPDATE tokend_credentials SET row_mac = \(ByteBuffer(bytes: tag)) WHERE user_identifier = \(user)", logger: store.logger
            ).collect()
        }
    }

    /// Bob's row carries Alice's sealed access token, tagged as it stands: it cannot be opened
    /// as Bob's (the seal binds the user). The node still starts with both credentials; Bob's
    /// token fails when it is asked for, Alice's opens.
    @Test func aTokenThatCannotBeOpenedFailsWhenAskedForNotAtStartUp() async throws {
        try await withServer { server in
            let writer = try await Fixture.open(server, node: "writer")
            _ = try await writer.insert(Fixture.credential("alice", access: "alice-access"), replacing: false)
            _ = try await writer.insert(Fixture.credential("bob", access: "bob-access"), replacing: false)
            try await server.psql(
                """
                UPDATE tokend_credentials b SET access_token = a.access_token, salt = a.salt FROM tokend_credentials a
                WHERE a.user_identifier = 'alice' AND b.user_identifier = 'bob'
                """)
            try await Self.retag("bob", store: writer)
            try await writer.close()
            let reader = try await Fixture.open(server, node: "reader")
            let loaded = try await reader.loadIndex()
            #expect(Set(loaded.map(\.metadata.userIdentifier)) == ["alice", "bob"])
            let alice = try #require(loaded.first { $0.metadata.userIdentifier == "alice" })
            #expect(try alice.accessToken.open(userIdentifier: "alice", provider: "example").value == "alice-access")
            let bob = try #require(loaded.first { $0.metadata.userIdentifier == "bob" })
            #expect(throws: StorageError(code: .decryption, message: "")) {
                try bob.accessToken.open(userIdentifier: "bob", provider: "example")
            }
            try await reader.close()
        }
    }
}

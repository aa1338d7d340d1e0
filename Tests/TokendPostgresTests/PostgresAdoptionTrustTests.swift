import Foundation
import Logging
import PostgresNIO
import Testing
import TokendCore
import TokendTestSupport

@testable import TokendPostgres
@testable import TokendStorage

/// `tokenctl store adopt` against someone who can write the database and knows when an
/// administrator will adopt (a held store tells them): adoption must not vouch for a row the
/// node can tell is older than one it served, however the row is dressed up.
@Suite(.serialized, .enabled(if: PostgresServer.isAvailable, "needs PostgreSQL 15 (scripts/setup-host.sh) and root"))
struct PostgresAdoptionTrustTests {
    typealias Trust = PostgresStoreTrustTests

    /// The old row is written back without its tag, at a generation above any the node has seen
    /// (an untagged row's generation is not authenticated), and the store's id deleted so that
    /// the node holds the store until an administrator adopts it. The node has served alice
    /// authenticated: an untagged alice is a row someone stripped, not one from before tags, and
    /// adoption must not tag it.
    @Test func anUntaggedCopyOfACredentialTheNodeServedIsNotVouchedFor() async throws {
        try await withServer { server in
            let (settings, store) = try await Trust.node(server, "a")
            try await Trust.writeTwice(store, server)
            try await store.close()
            try await server.psql(
                """
                DELETE FROM tokend_meta WHERE key = 'store_id';
                UPDATE saved SET row_mac = NULL, generation = 1000000;
                DELETE FROM tokend_credentials WHERE user_identifier = 'alice'; INSERT INTO tokend_credentials SELECT * FROM saved
                """)
            let restarted = try await Trust.open(settings)
            #expect(restarted.isHeld)
            let adopted = try await restarted.adopt(StoreAdoptionRequest())
            #expect(adopted.tagged.isEmpty, "adoption tagged \(adopted.tagged.map(\.userIdentifier))")
            #expect(adopted.refused.first?.problem?.contains("seen it authenticated") == true, "\(adopted.refused)")
            let reloaded = try? await restarted.load(userIdentifier: "alice")
            #expect(reloaded == nil, "the old row was served after adoption: \(reloaded?.accessToken.value ?? "")")
            #expect(try await server.psql("SELECT count(*) FROM tokend_credentials WHERE row_mac IS NOT NULL") == "0")
            try await restarted.close()
        }
    }

    /// The store's id is changed and an old row written back while the node is down. The node
    /// holds the store; adopted as it is, the rows (tagged for the id the node knew) stay
    /// refused. The administrator then sets the id back and adopts again: the node must still
    /// know that it served a newer row, rather than have dropped its floors at the first
    /// adoption.
    @Test func anIDChangedAndSetBackDoesNotDropTheFloors() async throws {
        try await withServer { server in
            let (settings, store) = try await Trust.node(server, "a")
            try await Trust.writeTwice(store, server)
            let id = store.storeID
            try await store.close()
            try await server.psql("UPDATE tokend_meta SET value = 'another store' WHERE key = 'store_id'")
            try await Trust.writeBack(server)
            let elsewhere = try await Trust.open(settings)
            #expect(elsewhere.isHeld)
            let first = try await elsewhere.adopt(StoreAdoptionRequest())
            #expect(first.refused.map(\.userIdentifier) == ["alice"], "\(first)")
            try await elsewhere.close()

            try await server.psql("UPDATE tokend_meta SET value = '\(id)' WHERE key = 'store_id'")
            let back = try await Trust.open(settings)
            let second = try await back.adopt(StoreAdoptionRequest())
            #expect(second.rolledBack.map(\.userIdentifier) == ["alice"], "\(second)")
            let reloaded = try? await back.load(userIdentifier: "alice")
            #expect(reloaded == nil, "the old row was served after the id was set back: \(reloaded?.accessToken.value ?? "")")
            try await back.close()
        }
    }

    /// Two stores share a master key. A row of the other store, in the tag format that named no
    /// store (written there by a node of the previous version, or taken from a backup of that
    /// time), is written into this store, whose node has served it with store-bound tags only.
    /// The node refuses the row; an adoption (the store's id deleted to bring one about) must not
    /// carry it over as if it were the node's own upgrade.
    @Test func aRowOfTheEarlierFormatMovedFromAnotherStoreIsNotCarriedOverByAnAdoption() async throws {
        try await withServer { server in
            try await server.psql("CREATE DATABASE other")
            let otherURL = String(server.url.dropLast("postgres".count)) + "other"
            let (settings, store) = try await Trust.node(server, "a")
            let other = try await Trust.open(
                Trust.settings(server, node: "b", directory: try Trust.stateDirectory(server, "b"), url: otherURL))
            _ = try await store.insert(Fixture.credential("alice"), replacing: false)
            _ = try await other.insert(Fixture.credential("carol", access: "from the other store"), replacing: false)
            let row = try await server.client(
                "psql",
                [
                    "-d", "other", "-v", "ON_ERROR_STOP=1", "-At", "-c",
                    "SELECT row_to_json(c)::text FROM tokend_credentials c WHERE user_identifier = 'carol'",
                ])
            try await other.close()
            try await server.psql(
                "INSERT INTO tokend_credentials SELECT * FROM json_populate_record(NULL::tokend_credentials, $json$\(row)$json$)")
            // Its tag as a node of the previous version wrote it (the key is the same).
            var legacy: [UInt8] = []
            for try await stored in try await store.client.query(
                PostgresQuery(
                    unsafeSQL: "SELECT \(PostgresCredentialStore.selectColumns) FROM tokend_credentials WHERE user_identifier = 'carol'"),
                logger: Logger(label: "test"))
            {
                let authenticity = try PostgresCredentialStore.authenticity(of: stored)
                legacy = RowAuthentication.legacyTag(
                    userIdentifier: "carol", contentDigest: authenticity.authenticity.contentDigest,
                    status: authenticity.authenticity.status, generation: authenticity.generation, keyring: Fixture.keyring)
            }
            let hex = legacy.map { String(format: "%02x", $0) }.joined()
            try await server.psql("UPDATE tokend_credentials SET row_mac = '\\x\(hex)' WHERE user_identifier = 'carol'")
            await #expect(throws: StorageError.self) { try await store.load(userIdentifier: "carol") }
            try await store.close()

            try await server.psql("DELETE FROM tokend_meta WHERE key = 'store_id'")
            let restarted = try await Trust.open(settings)
            let adopted = try await restarted.adopt(StoreAdoptionRequest())
            #expect(adopted.carriedOver == 0, "\(adopted)")
            let moved = try? await restarted.load(userIdentifier: "carol")
            #expect(moved == nil, "a row from another store was carried over: \(moved?.accessToken.value ?? "")")
            #expect(try await restarted.load(userIdentifier: "alice") != nil)
            try await restarted.close()
        }
    }

    /// A store from before row tags. An adoption without a dry run tags nothing; the
    /// administrator then checks the dry run, and someone who can write the database adds a
    /// reader to one of the rows it listed before the adoption: only the row still as the dry
    /// run showed it is tagged.
    @Test func anAdoptionTagsOnlyTheRowsAsTheDryRunShowedThem() async throws {
        try await withServer { server in
            try await PostgresRowIntegrityTests.storeFromBeforeRowTags(server)
            let upgraded = try await Fixture.open(server, node: "b")
            let blind = try await upgraded.adopt(StoreAdoptionRequest())
            #expect(blind.tagged.isEmpty && blind.refused.count == 2, "\(blind)")
            #expect(try await server.psql("SELECT count(*) FROM tokend_credentials WHERE row_mac IS NOT NULL") == "0")

            let preview = try await upgraded.adopt(StoreAdoptionRequest(dryRun: true))
            #expect(preview.tagged.map(\.userIdentifier) == ["alice", "bob"])
            try await server.psql(#"UPDATE tokend_credentials SET readers = '["uid:1000","uid:65534"]' WHERE user_identifier = 'alice'"#)
            let adopted = try await upgraded.adopt(StoreAdoptionRequest())
            #expect(adopted.tagged.map(\.userIdentifier) == ["bob"], "\(adopted)")
            #expect(adopted.refused.map(\.userIdentifier) == ["alice"], "\(adopted)")
            let edited = try? await upgraded.load(userIdentifier: "alice")
            #expect(edited == nil, "the row edited after the dry run was tagged: \(edited?.readers ?? [])")
            #expect(try await upgraded.load(userIdentifier: "bob") != nil)
            try await upgraded.close()
        }
    }
}

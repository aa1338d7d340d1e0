import Foundation
import Logging
import PostgresNIO
import Testing
import TokendCore
import TokendTestSupport

@testable import TokendPostgres
@testable import TokendStorage

/// What a node keeps outside the database about the shared store — the store's identity, the
/// schema it has seen, the newest generation of each credential — against someone who can
/// write the database: a schema "downgrade", a row written back after a kill, a deleted or
/// changed store id, rows moved from another store under the same master key.
@Suite(.serialized, .enabled(if: PostgresServer.isAvailable, "needs PostgreSQL 15 (scripts/setup-host.sh) and root"))
struct PostgresStoreTrustTests {
    /// A node's settings with its state in `directory`.
    static func settings(_ server: PostgresServer, node: String, directory: String, url: String? = nil) -> PostgresStoreSettings {
        var settings = Fixture.settings(server, node: node)
        settings.stateDirectory = directory
        if let url { settings.url = url }
        return settings
    }

    static func open(_ settings: PostgresStoreSettings) async throws -> PostgresCredentialStore {
        try await PostgresCredentialStore.open(
            settings: settings, keyring: Fixture.keyring, logger: Logger(label: "test.\(settings.nodeName)"))
    }

    /// Node `name`, opened with a fresh state directory, and its settings to open it again.
    static func node(_ server: PostgresServer, _ name: String) async throws -> (PostgresStoreSettings, PostgresCredentialStore) {
        let settings = Self.settings(server, node: name, directory: try Self.stateDirectory(server, name))
        return (settings, try await Self.open(settings))
    }

    /// A fresh directory for a node's state.
    static func stateDirectory(_ server: PostgresServer, _ name: String) throws -> String {
        let path = server.directory + "/state-" + name
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return path
    }

    /// Every file in `directory`, as a kill would leave it (the page cache survives the process).
    static func snapshot(_ directory: String) throws -> [String: Data] {
        var files: [String: Data] = [:]
        for name in try FileManager.default.contentsOfDirectory(atPath: directory) {
            files[name] = try Data(contentsOf: URL(fileURLWithPath: directory + "/" + name))
        }
        return files
    }

    static func restore(_ files: [String: Data], to directory: String) throws {
        for name in try FileManager.default.contentsOfDirectory(atPath: directory) {
            try FileManager.default.removeItem(atPath: directory + "/" + name)
        }
        for (name, data) in files { try data.write(to: URL(fileURLWithPath: directory + "/" + name)) }
    }

    /// alice's row as `first`, saved aside (table `saved`), then updated to `second` (a refresh).
    static func writeTwice(_ store: PostgresCredentialStore, _ server: PostgresServer) async throws {
        let first = try await store.insert(Fixture.credential("alice", access: "first"), replacing: false)
        try await server.psql("CREATE TABLE saved AS SELECT * FROM tokend_credentials")
        var next = first
        next.accessToken = SecretString("second")
        _ = try await store.update(next, expectedGeneration: first.generation)
    }

    /// The saved row written back over alice's.
    static func writeBack(_ server: PostgresServer) async throws {
        try await server.psql(
            "DELETE FROM tokend_credentials WHERE user_identifier = 'alice'; INSERT INTO tokend_credentials SELECT * FROM saved")
    }

    /// The node is killed now (its state directory left as it is, no close, no reconciliation),
    /// the saved row written back, and the node started again: it must not serve that row.
    static func killAndWriteBack(
        _ store: PostgresCredentialStore, _ settings: PostgresStoreSettings, _ directory: String, _ server: PostgresServer
    ) async throws {
        let onDisk = try snapshot(directory)
        try await store.close()
        try restore(onDisk, to: directory)
        try await writeBack(server)
        let restarted = try await open(settings)
        let reloaded = try? await restarted.load(userIdentifier: "alice")
        #expect(reloaded == nil, "the old row was accepted after a kill: \(reloaded?.accessToken.value ?? "")")
        try await restarted.close()
    }

    /// The row is updated (a refresh) and the node killed at once: what is on disk then must
    /// already refuse the older row written back while the node is down.
    @Test func aGenerationWrittenIsRememberedThroughAKill() async throws {
        try await withServer { server in
            let directory = try Self.stateDirectory(server, "a")
            let settings = Self.settings(server, node: "a", directory: directory)
            let store = try await Self.open(settings)
            try await Self.writeTwice(store, server)
            try await Self.killAndWriteBack(store, settings, directory, server)
        }
    }

    /// The same for a generation only read (and so served) by the node.
    @Test func aGenerationReadIsRememberedThroughAKill() async throws {
        try await withServer { server in
            let writer = try await Fixture.open(server, node: "writer")
            let first = try await writer.insert(Fixture.credential("alice", access: "first"), replacing: false)
            try await server.psql("CREATE TABLE saved AS SELECT * FROM tokend_credentials")
            let directory = try Self.stateDirectory(server, "reader")
            let settings = Self.settings(server, node: "reader", directory: directory)
            let reader = try await Self.open(settings)
            #expect(try await reader.load(userIdentifier: "alice")?.accessToken.value == "first")
            var next = first
            next.accessToken = SecretString("second")
            _ = try await writer.update(next, expectedGeneration: first.generation)
            #expect(try await reader.load(userIdentifier: "alice")?.accessToken.value == "second")
            try await Self.killAndWriteBack(reader, settings, directory, server)
            try await writer.close()
        }
    }

    /// A node that saw the authenticated store is started against it after the row tags were
    /// stripped and the schema versions from 4 deleted: it tags nothing, and serves nothing
    /// untagged.
    @Test func aSchemaDowngradeIsNotTaggedByANodeThatSawTheAuthenticatedStore() async throws {
        try await withServer { server in
            let directory = try Self.stateDirectory(server, "a")
            let settings = Self.settings(server, node: "a", directory: directory)
            let store = try await Self.open(settings)
            _ = try await store.insert(Fixture.credential("alice", access: "kept"), replacing: false)
            _ = try await store.generations()
            try await store.close()
            try await server.psql(
                """
                UPDATE tokend_credentials SET readers = '["uid:1000","uid:65534"]' WHERE user_identifier = 'alice';
                ALTER TABLE tokend_credentials DROP COLUMN row_mac, DROP COLUMN refresh_token_expires_at, DROP COLUMN relogin_warnings;
                DELETE FROM tokend_schema WHERE version >= 4
                """)
            let restarted = try? await Self.open(settings)
            let reloaded = try? await restarted?.load(userIdentifier: "alice")
            #expect(reloaded == nil, "the edited row was served after a downgrade: \(reloaded?.readers ?? [])")
            // It holds the store untouched (not even migrated), and says why.
            #expect(
                try await server.psql(
                    "SELECT count(*) FROM information_schema.columns WHERE table_name = 'tokend_credentials' AND column_name = 'row_mac'")
                    == "0")
            #expect(restarted?.health.problem?.contains("lower than the version 6") == true, "\(String(describing: restarted?.health))")
            #expect(try await server.psql("SELECT max(version) FROM tokend_schema") == "3")
            // A node that never ran migrates the schema but tags nothing either.
            let fresh = try await Self.open(Self.settings(server, node: "b", directory: try Self.stateDirectory(server, "b")))
            await #expect(throws: StorageError.self) { try await fresh.load(userIdentifier: "alice") }
            #expect(try await server.psql("SELECT count(*) FROM tokend_credentials WHERE row_mac IS NOT NULL") == "0")
            try await fresh.close()
            // The administrator sees the added reader; this node, which served the row with its
            // tag, does not vouch for it without one.
            let preview = try #require(try await restarted?.adopt(StoreAdoptionRequest(dryRun: true)))
            #expect(preview.tagged.isEmpty)
            #expect(preview.refused.map(\.readers) == [["uid:1000", "uid:65534"]])
            #expect(preview.refused.first?.problem?.contains("seen it authenticated") == true, "\(preview.refused)")
            #expect(preview.heldBecause?.contains("lower than the version 6") == true)
            #expect(restarted?.isHeld == true)
            try await restarted?.close()
        }
    }

    /// The store's id is deleted while the node is down, and an old row written back: the node
    /// does not start again with no floors.
    @Test func aDeletedStoreIDDoesNotDropTheFloors() async throws {
        try await withServer { server in
            let (settings, store) = try await Self.node(server, "a")
            try await Self.writeTwice(store, server)
            try await store.close()
            try await server.psql(
                """
                DELETE FROM tokend_meta WHERE key = 'store_id';
                DELETE FROM tokend_credentials WHERE user_identifier = 'alice'; INSERT INTO tokend_credentials SELECT * FROM saved
                """)
            let restarted = try? await Self.open(settings)
            let reloaded = try? await restarted?.load(userIdentifier: "alice")
            #expect(reloaded == nil, "the old row was accepted after the store's id was deleted: \(reloaded?.accessToken.value ?? "")")
            #expect(restarted?.health.problem?.contains("id was deleted") == true, "\(String(describing: restarted?.health))")
            // Adopted, the store gets back the id this node knew, and the old row is still refused.
            let adopted = try #require(try await restarted?.adopt(StoreAdoptionRequest()))
            #expect(adopted.rolledBack.map(\.userIdentifier) == ["alice"] && adopted.credentials == 0)
            #expect(try await server.psql("SELECT value FROM tokend_meta WHERE key = 'store_id'") == adopted.storeID)
            await #expect(throws: StorageError.self) { try await restarted?.load(userIdentifier: "alice") }
            // After a restore on purpose, the administrator serves it again.
            let restored = try #require(try await restarted?.adopt(StoreAdoptionRequest(restored: true)))
            #expect(restored.credentials == 1)
            #expect(try await restarted?.load(userIdentifier: "alice")?.accessToken.value == "first")
            try await restarted?.close()
        }
    }

    /// A row written back after the node removed its credential is that very row, at the
    /// generation the node last saw: refused too, also after a restart.
    @Test func aRemovedCredentialWrittenBackIsRefused() async throws {
        try await withServer { server in
            let (settings, store) = try await Self.node(server, "a")
            let stored = try await store.insert(Fixture.credential("alice", access: "revoked"), replacing: false)
            try await server.psql("CREATE TABLE saved AS SELECT * FROM tokend_credentials")
            #expect(try await store.remove(userIdentifier: "alice", expectedGeneration: stored.generation))
            try await server.psql("INSERT INTO tokend_credentials SELECT * FROM saved")
            await #expect(throws: StorageError.self) { try await store.load(userIdentifier: "alice") }
            try await store.close()
            let restarted = try await Self.open(settings)
            #expect(try await restarted.loadIndex().isEmpty)
            // A credential added again gets a newer generation, and is served.
            try await server.psql("DELETE FROM tokend_credentials")
            _ = try await restarted.insert(Fixture.credential("alice", access: "new"), replacing: false)
            #expect(try await restarted.load(userIdentifier: "alice")?.accessToken.value == "new")
            try await restarted.close()
        }
    }

    /// The same for a removal this node did not make but found: at start, and when it reads the
    /// credential again.
    @Test func aRemovalFoundByTheNodeIsRemembered() async throws {
        try await withServer { server in
            let settings = Self.settings(server, node: "a", directory: try Self.stateDirectory(server, "a"))
            let writer = try await Fixture.open(server, node: "writer")
            _ = try await writer.insert(Fixture.credential("alice"), replacing: false)
            _ = try await writer.insert(Fixture.credential("bob"), replacing: false)
            try await server.psql("CREATE TABLE saved AS SELECT * FROM tokend_credentials")
            let node = try await Self.open(settings)
            #expect(try await node.loadIndex().count == 2)
            try await node.close()
            // alice is removed while the node is down, bob while it runs.
            #expect(try await writer.remove(userIdentifier: "alice"))
            let restarted = try await Self.open(settings)
            #expect(try await restarted.loadIndex().map(\.metadata.userIdentifier) == ["bob"])
            #expect(try await writer.remove(userIdentifier: "bob"))
            #expect(try await restarted.load(userIdentifier: "bob") == nil)
            try await server.psql("INSERT INTO tokend_credentials SELECT * FROM saved")
            #expect(try await restarted.loadIndex().isEmpty)
            try await restarted.close()
            try await writer.close()
        }
    }

    /// Tags as a node of the previous version wrote them: the format that did not name the
    /// store, at schema version 5.
    static func backToTheEarlierFormat(_ store: PostgresCredentialStore, _ server: PostgresServer) async throws {
        let logger = Logger(label: "test")
        var legacy: [(String, [UInt8])] = []
        for try await row in try await store.client.query(
            PostgresQuery(unsafeSQL: "SELECT \(PostgresCredentialStore.selectColumns) FROM tokend_credentials"), logger: logger)
        {
            let user = try row.makeRandomAccess()["user_identifier"].decode(String.self)
            let stored = try PostgresCredentialStore.authenticity(of: row)
            legacy.append(
                (
                    user,
                    RowAuthentication.legacyTag(
                        userIdentifier: user, contentDigest: stored.authenticity.contentDigest, status: stored.authenticity.status,
                        generation: stored.generation, keyring: Fixture.keyring)
                ))
        }
        for (user, tag) in legacy {
            try await server.psql(
                "UPDATE tokend_credentials SET row_mac = '\\x\(tag.map { String(format: "%02x", $0) }.joined())' WHERE user_identifier = '\(user)'"
            )
        }
        try await server.psql("DELETE FROM tokend_schema WHERE version >= 6")
    }

    /// A node of the previous version (its floors in `shared-store-generations.json`) starts
    /// this version on its store: it carries the store's tags over to the format that names the
    /// store, and its floors with them. A node that never served the store leaves them refused,
    /// for an administrator to adopt.
    @Test func aNodeUpgradingFromThePreviousVersionCarriesItsStoreOver() async throws {
        try await withServer { server in
            let directory = try Self.stateDirectory(server, "a")
            let settings = Self.settings(server, node: "a", directory: directory)
            let store = try await Self.open(settings)
            let alice = try await store.insert(Fixture.credential("alice", access: "kept"), replacing: false)
            _ = try await store.insert(Fixture.credential("bob"), replacing: false)
            try await Self.backToTheEarlierFormat(store, server)
            let id = store.storeID
            try await store.close()
            try FileManager.default.removeItem(atPath: directory + "/" + SharedStoreMemory.fileName)
            try GenerationFloors(store: id, floors: ["alice": alice.generation + 100]).encoded().withUnsafeBytes {
                try Data($0).write(to: URL(fileURLWithPath: directory + "/shared-store-generations.json"))
            }
            chmod(directory + "/shared-store-generations.json", 0o600)

            // A node that never ran sees tags it cannot vouch for.
            let fresh = try await Self.open(Self.settings(server, node: "b", directory: try Self.stateDirectory(server, "b")))
            await #expect(throws: StorageError.self) { try await fresh.load(userIdentifier: "bob") }
            try await fresh.close()

            let upgraded = try await Self.open(settings)
            #expect(!FileManager.default.fileExists(atPath: directory + "/shared-store-generations.json"))
            #expect(upgraded.memory.record == .known(SharedStoreRecord(storeID: id, schemaVersion: 6)))
            #expect(try await upgraded.load(userIdentifier: "bob") != nil)
            // The floors came along: alice's row is older than the one the file says it saw.
            await #expect(throws: StorageError.self) { try await upgraded.load(userIdentifier: "alice") }
            try await upgraded.close()
            let again = try await Self.open(Self.settings(server, node: "b", directory: try Self.stateDirectory(server, "b")))
            #expect(try await again.load(userIdentifier: "bob") != nil)
            try await again.close()
        }
    }

    /// The whole store is dropped while the node is down (a database recreated, or emptied by
    /// an attacker): the node holds it rather than start a new store and forget its floors;
    /// adopted, the store is made again under the id the node knew.
    @Test func aDroppedStoreIsHeldUntilAdopted() async throws {
        try await withServer { server in
            let settings = Self.settings(server, node: "a", directory: try Self.stateDirectory(server, "a"))
            let store = try await Self.open(settings)
            _ = try await store.insert(Fixture.credential("alice"), replacing: false)
            let id = store.storeID
            try await store.close()
            try await server.psql("DROP SCHEMA public CASCADE; CREATE SCHEMA public")
            let restarted = try await Self.open(settings)
            #expect(restarted.health.problem?.contains("holds no shared store") == true, "\(restarted.health)")
            #expect(try await restarted.loadIndex().isEmpty)
            #expect(try await server.psql("SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'") == "0")
            let adopted = try await restarted.adopt(StoreAdoptionRequest())
            #expect(adopted.storeID == id && adopted.schemaVersionBefore == 0 && adopted.credentials == 0)
            _ = try await restarted.insert(Fixture.credential("bob"), replacing: false)
            #expect(try await restarted.load(userIdentifier: "bob") != nil)
            try await restarted.close()
        }
    }

    /// Two stores (two databases) whose nodes share one master key: a row copied from one into
    /// the other is refused there.
    @Test func aRowMovedFromAnotherStoreWithTheSameKeyIsRefused() async throws {
        try await withServer { server in
            try await server.psql("CREATE DATABASE other")
            let otherURL = String(server.url.dropLast("postgres".count)) + "other"
            let first = try await Self.open(Self.settings(server, node: "a", directory: try Self.stateDirectory(server, "a")))
            let second = try await Self.open(
                Self.settings(server, node: "b", directory: try Self.stateDirectory(server, "b"), url: otherURL))
            _ = try await first.insert(Fixture.credential("alice", access: "from the first store"), replacing: false)
            _ = try await second.insert(Fixture.credential("bob", access: "bob's"), replacing: false)
            let row = try await server.psql("SELECT row_to_json(c)::text FROM tokend_credentials c WHERE user_identifier = 'alice'")
            try await server.client(
                "psql",
                [
                    "-d", "other", "-v", "ON_ERROR_STOP=1", "-At", "-c",
                    "INSERT INTO tokend_credentials SELECT * FROM json_populate_record(NULL::tokend_credentials, $json$\(row)$json$)",
                ])
            let moved = try? await second.load(userIdentifier: "alice")
            #expect(moved == nil, "a row from another store was accepted: \(moved?.accessToken.value ?? "")")
            #expect(try await second.loadIndex().map(\.metadata.userIdentifier) == ["bob"])
            try await first.close()
            try await second.close()
        }
    }
}

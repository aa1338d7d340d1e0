import Foundation
import Testing

/// A store written by an older tokend opens after an upgrade with its credentials intact; one
/// written by a newer tokend is refused with a message that says so (Tests/Fixtures/stores).
@Suite(.serialized)
struct StoreUpgradeTests {
    static let fixtures = Repository.root + "/Tests/Fixtures/stores"

    static let configuration = DaemonProcess.configuration(
        providers: DaemonProcess.defaultProviders + "\nmax_token_age = \"36500d\"")

    /// A daemon directory holding a copy of the fixture `name` as its store.
    static func daemon(with name: String) throws -> DaemonProcess {
        let daemon = try DaemonProcess(configuration: configuration)
        try FileManager.default.createDirectory(
            atPath: daemon.stateDirectory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        for file in ["tokend.sqlite", "tokend.key"] {
            try FileManager.default.copyItem(atPath: "\(fixtures)/\(name)/\(file)", toPath: "\(daemon.stateDirectory)/\(file)")
            chmod("\(daemon.stateDirectory)/\(file)", 0o600)
        }
        return daemon
    }

    static func meta(_ path: String) async throws -> [String: String] {
        let script = """
            import sqlite3, sys
            db = sqlite3.connect("file:" + sys.argv[1] + "?mode=ro", uri=True)
            for key, value in db.execute("SELECT key, value FROM meta"):
                print("%s=%s" % (key, value))
            """
        let result = try await runCommand("/usr/bin/python3", ["-c", script, path])
        var meta: [String: String] = [:]
        for line in result.stdout.split(separator: "\n") {
            let parts = line.split(separator: "=", maxSplits: 1).map(String.init)
            if parts.count == 2 { meta[parts[0]] = parts[1] }
        }
        return meta
    }

    @Test(arguments: [("schema-1", "v1"), ("schema-2", "v2")])
    func aStoreFromAnEarlierSchemaOpensWithEveryCredential(directory: String, prefix: String) async throws {
        let daemon = try Self.daemon(with: directory)
        try await daemon.start()
        let client = try RawClient(path: daemon.socketPath)
        let alice = try client.call(Tokens.tokenCall(user: "alice"))
        #expect(alice.accessToken == "fixture-\(prefix)-access-alice", "\(alice)")
        #expect((alice.parameters["credentials"] as? [String: Any])?["scope"] as? String == "read write", "\(alice)")
        let status = try OAuthRefreshTests.status(client, "svc-backup")
        #expect(status["readers"] as? [String] == ["uid:7100", "gid:7200"], "\(status)")
        let shared = try await OtherUser.call(Tokens.tokenCall(user: "svc-backup"), socket: daemon.socketPath, uid: 7100, gid: 7100)
        #expect(shared.accessToken == "fixture-\(prefix)-access-svc", "\(shared)")
        #expect(try await daemon.stop() == 0)
        let meta = try await Self.meta(daemon.stateDirectory + "/tokend.sqlite")
        #expect(meta["schema_version"] == "5", "\(meta)")
        #expect(meta["last_opened_by"] != nil && meta["created_by"] != nil, "\(meta)")
    }

    @Test func aStoreFromANewerTokendIsRefusedWithAClearMessage() async throws {
        let daemon = try Self.daemon(with: "schema-2")
        let store = daemon.stateDirectory + "/tokend.sqlite"
        let result = try await runCommand(
            "/usr/bin/python3",
            [
                "-c",
                "import sqlite3, sys; db = sqlite3.connect(sys.argv[1]); db.execute(\"INSERT INTO grdb_migrations VALUES ('v9-from-the-future')\"); db.commit()",
                store,
            ])
        #expect(result.status == 0, "\(result)")
        await #expect(throws: (any Error).self) { try await daemon.start(timeout: .seconds(10)) }
        #expect(daemon.log.contains("written by a newer tokend"), "\(daemon.log.suffix(1500))")
        #expect(!daemon.process.isRunning)
    }
}

import Foundation
import Testing
import TokendTestSupport

/// `tokenctl backup` and the documented restore (stop, install the copy, start), against the
/// real IdP, which rotates refresh tokens and revokes the old one at once.
@Suite(.serialized)
struct BackupRestoreTests {
    static func tokenctl(_ arguments: [String], as uid: UInt32? = nil) async throws -> CommandResult {
        if let uid {
            return try await runCommand(
                "/usr/bin/setpriv", ["--reuid=\(uid)", "--regid=\(uid)", "--clear-groups", Repository.binary("tokenctl")] + arguments)
        }
        return try await runCommand(Repository.binary("tokenctl"), arguments)
    }

    /// Rows and integrity of a SQLite file, read with Python's sqlite3 (another reader than
    /// tokend's).
    static func inspect(_ path: String) async throws -> (credentials: Int, integrity: String) {
        let script = """
            import sqlite3, sys
            db = sqlite3.connect("file:" + sys.argv[1] + "?mode=ro", uri=True)
            print(db.execute("SELECT count(*) FROM credentials").fetchone()[0])
            print(db.execute("PRAGMA integrity_check").fetchone()[0])
            """
        let result = try await runCommand("/usr/bin/python3", ["-c", script, path])
        let lines = result.stdout.split(separator: "\n").map(String.init)
        guard result.status == 0, lines.count == 2, let count = Int(lines[0]) else { throw TestFailure("sqlite3: \(result)") }
        return (count, lines[1])
    }

    @Test func aBackupTakenWhileServingRestoresEveryCredentialAndRotationGoesOn() async throws {
        guard IdentityProvider.isAvailable else { return }
        let setup = try await IdPDaemon.start()
        let client = try RawClient(path: setup.daemon.socketPath)
        var minted: [String: [String: Any]] = [:]
        for user in ["alice", "bob", "carol"] { minted[user] = try await setup.addMinted(user, client: client) }

        // Taken while another client keeps asking for tokens.
        let socket = setup.daemon.socketPath
        let asking = Task.detached { () -> Int in
            let asker = try RawClient(path: socket)
            var errors = 0
            for _ in 0..<300 where try asker.call(Tokens.tokenCall(user: "bob")).errorName != nil { errors += 1 }
            return errors
        }
        let file = setup.directory.file("backup.sqlite")
        let backup = try await Self.tokenctl(["backup", "--socket", socket, file])
        #expect(backup.status == 0, "\(backup)")
        #expect(backup.stdout.contains("3 credentials"), "\(backup.stdout)")
        #expect(try await asking.value == 0, "calls failed during the backup")
        var info = stat()
        #expect(stat(file, &info) == 0 && info.st_mode & 0o777 == 0o600, "mode \(String(info.st_mode & 0o777, radix: 8))")
        let inspected = try await Self.inspect(file)
        #expect(inspected.credentials == 3 && inspected.integrity == "ok", "\(inspected)")
        // Tokens stay sealed in the copy.
        let bytes = try Data(contentsOf: URL(fileURLWithPath: file))
        for (user, token) in minted {
            for key in ["access_token", "refresh_token"] {
                #expect(bytes.range(of: Data((token[key] as! String).utf8)) == nil, "\(user)'s \(key) is in the backup in plaintext")
            }
        }
        // Administrators only; an existing file is not replaced without --force.
        let denied = try await Self.tokenctl(["backup", "--socket", socket, setup.directory.file("mine.sqlite")], as: 65534)
        #expect(denied.status == 5, "\(denied)")
        let again = try await Self.tokenctl(["backup", "--socket", socket, file])
        #expect(again.status == 1 && again.stderr.contains("use --force"), "\(again)")
        #expect(try await Self.tokenctl(["backup", "--socket", socket, "--force", file]).status == 0)

        // After the backup alice's refresh token rotates: the IdP revokes the one the copy holds.
        let aliceToken = minted["alice"]!["access_token"] as! String
        let rotated = try client.call(Tokens.tokenCall(user: "alice", rejected: aliceToken))
        #expect(rotated.errorName == nil && rotated.accessToken != aliceToken, "\(rotated)")

        // Restore: stop, install the copy as the store, start.
        let configuration = try String(contentsOfFile: setup.directory.file("tokend.toml"), encoding: .utf8)
        #expect(try await setup.daemon.stop() == 0)
        let store = setup.daemon.stateDirectory + "/tokend.sqlite"
        for suffix in ["", "-wal", "-shm"] { unlink(store + suffix) }
        try FileManager.default.copyItem(atPath: file, toPath: store)
        chmod(store, 0o600)
        let restored = try DaemonProcess(configuration: configuration, directory: setup.directory)
        try await restored.start()
        defer { _ = Task { _ = try? await restored.stop() } }
        let after = try RawClient(path: restored.socketPath)
        for user in ["alice", "bob", "carol"] {
            let reply = try after.call(Tokens.tokenCall(user: user))
            #expect(reply.accessToken == minted[user]!["access_token"] as? String, "\(user) after the restore: \(reply)")
        }
        // Rotation goes on for the credentials the copy has current.
        let bobToken = minted["bob"]!["access_token"] as! String
        let bob = try after.call(Tokens.tokenCall(user: "bob", rejected: bobToken))
        #expect(bob.errorName == nil && bob.accessToken != bobToken, "\(bob)")
        // alice's copy is older than her last rotation: one grant, refused, and a new login is
        // asked for; no loop.
        let grantsBefore = try await setup.idp.postCount()
        let alice = try after.call(Tokens.tokenCall(user: "alice", rejected: aliceToken))
        #expect(alice.errorName == "io.tokend.TokenProvider.ReauthenticationRequired", "\(alice)")
        let aliceAgain = try after.call(Tokens.tokenCall(user: "alice", minValid: 1))
        #expect(aliceAgain.errorName == "io.tokend.TokenProvider.ReauthenticationRequired", "\(aliceAgain)")
        try await Task.sleep(for: .seconds(2))
        #expect(try await setup.idp.postCount() - grantsBefore == 1, "one grant for alice after the restore")
        #expect(restored.process.isRunning)
        await setup.idp.stop()
    }

    /// The shared PostgreSQL store has no online backup of its own: tokend says to use pg_dump,
    /// and a dump restored into a fresh database serves every credential.
    @Test(.enabled(if: PostgresServer.isAvailable, "needs PostgreSQL 15 (scripts/setup-host.sh) and root"))
    func theSharedStoreIsBackedUpWithPgDumpAndRestoredIntoAFreshDatabase() async throws {
        let postgres = try await PostgresServer()
        let directory = try ScratchDirectory()
        try directory.write("pg-password", PostgresServer.password + "\n", mode: 0o600)
        func configuration(database: String) -> String {
            DaemonProcess.configuration(
                extraDaemon: "key_file = \"\(directory.file("tokend.key"))\"",
                providers: DaemonProcess.defaultProviders + """

                    [store]
                    kind = "postgresql"
                    url = "postgresql://postgres@127.0.0.1:\(postgres.port)/\(database)"
                    password_file = "pg-password"
                    """)
        }
        let daemon = try DaemonProcess(configuration: configuration(database: "postgres"), directory: directory)
        try await daemon.start()
        let client = try RawClient(path: daemon.socketPath)
        var tokens: [String: String] = [:]
        for user in ["alice", "bob"] {
            tokens[user] = Tokens.random("pg-")
            #expect(try client.call(Tokens.addCall(user: user, access: tokens[user]!, refresh: Tokens.random("r-"))).errorName == nil)
        }
        let refused = try await Self.tokenctl(["backup", "--socket", daemon.socketPath, directory.file("copy.sqlite")])
        #expect(refused.status == 1 && refused.stderr.contains("pg_dump"), "\(refused)")
        #expect(!FileManager.default.fileExists(atPath: directory.file("copy.sqlite")))

        // docs/operations.md: pg_dump while tokend serves, pg_restore into a fresh database.
        let dump = directory.file("tokend.dump")
        try await postgres.client("pg_dump", ["-d", "postgres", "-Fc", "-f", dump])
        #expect(try await daemon.stop() == 0)
        try await postgres.client("createdb", ["restored"])
        try await postgres.client("pg_restore", ["-d", "restored", "--no-owner", dump])
        let restored = try DaemonProcess(configuration: configuration(database: "restored"), directory: directory)
        try await restored.start()
        let after = try RawClient(path: restored.socketPath)
        for (user, token) in tokens {
            let reply = try after.call(Tokens.tokenCall(user: user))
            #expect(reply.accessToken == token, "\(user) from the restored database: \(reply)")
        }
        _ = try await restored.stop()
        await postgres.shutdown()
    }
}

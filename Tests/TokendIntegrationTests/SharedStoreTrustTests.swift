import Foundation
import Testing
import TokendTestSupport

/// A database writer attacks what a node remembers about the shared store: the schema version
/// (a "downgrade" that strips the row tags), the newest generation of each credential (lost to
/// a kill), and the store's identity. Real tokend nodes, real PostgreSQL, the real test IdP,
/// readers as another uid.
@Suite(.serialized, .enabled(if: PostgresServer.isAvailable, "needs PostgreSQL 15 (scripts/setup-host.sh) and root"))
struct SharedStoreTrustTests {
    typealias Fleet = SharedStoreTests.Fleet

    /// Stops node `index` with `signal` and starts it again on the same directory (a fresh log).
    static func restart(_ fleet: Fleet, node index: Int, signal: Int32 = SIGTERM, wipeState: Bool = false) async throws {
        _ = try await fleet.nodes[index].stop(signal: signal)
        try await start(fleet, node: index, wipeState: wipeState)
    }

    /// Starts node `index` (stopped) again on its directory; `wipeState` removes its state
    /// directory first, as on a node that never ran.
    static func start(_ fleet: Fleet, node index: Int, wipeState: Bool = false) async throws {
        let directory = fleet.nodes[index].directory
        if wipeState {
            let state = fleet.nodes[index].stateDirectory
            for name in (try? FileManager.default.contentsOfDirectory(atPath: state)) ?? [] where name != "tokend.key" {
                try FileManager.default.removeItem(atPath: state + "/" + name)
            }
        }
        fleet.nodes[index] = try DaemonProcess(
            configuration: try String(contentsOfFile: directory.file("tokend.toml"), encoding: .utf8), directory: directory)
        try await fleet.nodes[index].start()
    }

    /// `tokenctl store adopt` with `arguments` on node `index`, as root.
    static func adopt(_ fleet: Fleet, node index: Int, _ arguments: [String] = []) async throws -> CommandResult {
        try await runCommand(Repository.binary("tokenctl"), ["--socket", fleet.nodes[index].socketPath, "store", "adopt"] + arguments)
    }

    /// Someone with write access to the database adds uid 65534 as a reader, drops `row_mac` and
    /// the later columns and deletes the schema versions from 4 up, so that the store looks as
    /// it did before rows were authenticated. Neither the node that had seen the authenticated
    /// store nor a node that never ran tags the edited row: uid 65534 gets nothing from either.
    @Test func aSchemaDowngradeDoesNotLaunderAnEditedRow() async throws {
        let fleet = try await Fleet(count: 2, lifetime: 3600)
        let token = Tokens.random("laundered-")
        let added = try fleet.client(0).call(Tokens.addCall(user: "laundered", access: token, refresh: nil, readers: ["uid:0"]))
        #expect(added.errorName == nil, "\(added)")
        #expect(
            try await fleet.eventually(.seconds(10)) { try fleet.client(1).call(Tokens.tokenCall(user: "laundered")).accessToken == token })
        for node in 0..<2 { _ = try await fleet.nodes[node].stop() }
        try await fleet.database.psql(
            """
            UPDATE tokend_credentials SET readers = '["uid:0","uid:65534"]' WHERE user_identifier = 'laundered';
            ALTER TABLE tokend_credentials DROP COLUMN row_mac, DROP COLUMN refresh_token_expires_at, DROP COLUMN relogin_warnings;
            DELETE FROM tokend_schema WHERE version >= 4
            """)
        // Node 0 saw the authenticated store; node 1 starts as a node that never ran.
        try await Self.start(fleet, node: 0)
        try await Self.start(fleet, node: 1, wipeState: true)
        for node in 0..<2 {
            let stolen = try await OtherUser.call(
                Tokens.tokenCall(user: "laundered"), socket: fleet.nodes[node].socketPath, uid: 65534, gid: 65534)
            #expect(stolen.accessToken == nil, "node \(node) gave uid 65534 the token: \(stolen)")
            #expect(!fleet.nodes[node].log.contains("authenticated the stored credentials"), "node \(node) tagged the rows itself")
        }
        #expect(try await fleet.database.psql("SELECT count(*) FROM tokend_credentials WHERE row_mac IS NOT NULL") == "0")
        // Node 0 holds the store and says why, pointing at the administrator's step.
        #expect(fleet.nodes[0].log.contains("lower than the version 6"), "\(fleet.nodes[0].log.suffix(3000))")
        #expect(fleet.nodes[0].log.contains("tokenctl store adopt"))
        let status = try fleet.status(0).daemon
        #expect("\(status)".contains("lower than the version 6"), "\(status)")
        // uid 65534 may not adopt; root's dry run shows the added reader and changes nothing.
        let refused = try await runCommand(
            "/usr/bin/setpriv",
            [
                "--reuid=65534", "--regid=65534", "--clear-groups", Repository.binary("tokenctl"), "--socket", fleet.nodes[0].socketPath,
                "store", "adopt",
            ])
        #expect(refused.status != 0, "\(refused)")
        let preview = try await Self.adopt(fleet, node: 0, ["--dry-run"])
        #expect(preview.status == 0, "\(preview)")
        #expect(preview.stdout.contains("laundered") && preview.stdout.contains("uid:65534"), "\(preview.stdout)")
        #expect(preview.stdout.contains("Nothing was changed"), "\(preview.stdout)")
        #expect(try await fleet.database.psql("SELECT count(*) FROM tokend_credentials WHERE row_mac IS NOT NULL") == "0")
        // The administrator removes the edited row, adopts the store, and enrols the credential again.
        try await fleet.database.psql("DELETE FROM tokend_credentials WHERE user_identifier = 'laundered'")
        let adopted = try await Self.adopt(fleet, node: 0)
        #expect(adopted.status == 0 && adopted.stdout.contains("Adopted the store"), "\(adopted)")
        let again = try fleet.client(0).call(Tokens.addCall(user: "laundered", access: token, refresh: nil, readers: ["uid:0"]))
        #expect(again.errorName == nil, "\(again)")
        #expect(try fleet.client(0).call(Tokens.tokenCall(user: "laundered")).accessToken == token)
        let afterwards = try await OtherUser.call(
            Tokens.tokenCall(user: "laundered"), socket: fleet.nodes[0].socketPath, uid: 65534, gid: 65534)
        #expect(afterwards.accessToken == nil, "\(afterwards)")
        await fleet.stop()
    }

    /// A node refreshes a credential (node 0) or serves the refreshed token (node 1) and is
    /// killed at once; the row as it was before the refresh is written back with SQL while they
    /// are down. Neither serves the old token after it starts again: each refuses the row as
    /// rolled back.
    @Test func aKillRightAfterARefreshDoesNotLetTheOldRowBack() async throws {
        // No reconciliation while the test runs: nothing but the refresh itself may save the floors.
        let fleet = try await Fleet(count: 2, lifetime: 3600, reconcile: "1h")
        let minted = try await fleet.add("alice", lifetime: 3600)
        let old = try #require(minted["access_token"] as? String)
        #expect(try await fleet.eventually(.seconds(10)) { try fleet.client(1).call(Tokens.tokenCall(user: "alice")).accessToken == old })
        try await fleet.database.psql("CREATE TABLE saved AS SELECT * FROM tokend_credentials WHERE user_identifier = 'alice'")
        let refreshed = try fleet.client(0).call(Tokens.tokenCall(user: "alice", rejected: old))
        let new = try #require(refreshed.accessToken, "\(refreshed) \(fleet.logs)")
        #expect(new != old)
        #expect(try await fleet.eventually(.seconds(10)) { try fleet.client(1).call(Tokens.tokenCall(user: "alice")).accessToken == new })
        for node in 0..<2 { _ = try await fleet.nodes[node].stop(signal: SIGKILL) }
        try await fleet.database.psql(
            "DELETE FROM tokend_credentials WHERE user_identifier = 'alice'; INSERT INTO tokend_credentials SELECT * FROM saved")
        for node in 0..<2 {
            try await Self.start(fleet, node: node)
            let reply = try fleet.client(node).call(Tokens.tokenCall(user: "alice"))
            #expect(reply.accessToken != old, "node \(node) served the token the refresh had replaced")
            #expect(
                fleet.nodes[node].log.contains("rolled back"),
                "node \(node) did not log the rollback: \(fleet.nodes[node].log.suffix(3000))")
        }
        await fleet.stop()
    }

    /// The store's id is deleted and an old row written back while the node is stopped: the
    /// node must not start afresh with no floors and serve the old row.
    @Test func aDeletedStoreIDDoesNotWipeTheNodesMemory() async throws {
        let fleet = try await Fleet(count: 1, lifetime: 3600, reconcile: "1h")
        let old = Tokens.random("old-")
        let first = try fleet.client(0).call(Tokens.addCall(user: "alice", access: old, refresh: nil, readers: ["uid:0"]))
        #expect(first.errorName == nil, "\(first)")
        try await fleet.database.psql("CREATE TABLE saved AS SELECT * FROM tokend_credentials WHERE user_identifier = 'alice'")
        let new = Tokens.random("new-")
        let replaced = try fleet.client(0).call(SharedStoreIntegrityTests.replaceCall(user: "alice", access: new, readers: ["uid:0"]))
        #expect(replaced.errorName == nil, "\(replaced)")
        _ = try await fleet.nodes[0].stop()
        try await fleet.database.psql(
            """
            DELETE FROM tokend_meta WHERE key = 'store_id';
            DELETE FROM tokend_credentials WHERE user_identifier = 'alice'; INSERT INTO tokend_credentials SELECT * FROM saved
            """)
        try await Self.start(fleet, node: 0)
        let reply = try fleet.client(0).call(Tokens.tokenCall(user: "alice"))
        #expect(reply.accessToken != old, "the node served the row written back: \(fleet.logs)")
        #expect(fleet.nodes[0].log.contains("id was deleted"), "\(fleet.nodes[0].log.suffix(3000))")
        // The administrator adopts the store: it gets its id back, and the old row stays refused.
        let adopted = try await Self.adopt(fleet, node: 0)
        #expect(adopted.status == 0, "\(adopted)")
        #expect(adopted.stdout.contains("rolled back") && adopted.stdout.contains("alice"), "\(adopted.stdout)")
        #expect(try await fleet.database.psql("SELECT count(*) FROM tokend_meta WHERE key = 'store_id'") == "1")
        let afterwards = try fleet.client(0).call(Tokens.tokenCall(user: "alice"))
        #expect(afterwards.accessToken != old, "\(afterwards)")
        #expect(fleet.nodes[0].log.contains("rolled back"))
        await fleet.stop()
    }
}

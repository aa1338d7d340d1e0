import Foundation
import Testing
import TokendTestSupport

/// Attacks on the shared PostgreSQL store by someone who can write its tables (a database
/// administrator, a stolen database password): rows edited or rolled back outside tokend grant
/// nothing, and a node that has not seen a credential yet cannot let another uid take it over.
@Suite(.serialized, .enabled(if: PostgresServer.isAvailable, "needs PostgreSQL 15 (scripts/setup-host.sh) and root"))
struct SharedStoreIntegrityTests {
    typealias Fleet = SharedStoreTests.Fleet

    static let metricsConfiguration = "[metrics]\ntextfile = \"tokend.prom\"\ntextfile_interval = \"1s\""

    /// The sum of `tokend_store_integrity_failures_total` with `kind` in node `index`'s metrics file.
    static func integrityFailures(_ fleet: Fleet, node index: Int, kind: String) -> Int {
        let path = fleet.nodes[index].directory.file("tokend.prom")
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else { return 0 }
        return text.split(separator: "\n")
            .filter { $0.hasPrefix("tokend_store_integrity_failures_total{") && $0.contains("kind=\"\(kind)\"") }
            .compactMap { $0.split(separator: " ").last.flatMap { Double($0) } }
            .reduce(0) { $0 + Int($1) }
    }

    /// `psql UPDATE … SET readers = …` adds uid 7001 to a credential: neither the node that
    /// serves it nor a node started afterwards gives uid 7001 the token; the row is refused,
    /// logged and counted.
    @Test func aReaderAddedWithSQLGetsNothing() async throws {
        let fleet = try await Fleet(count: 1, lifetime: 3600, metrics: Self.metricsConfiguration)
        let token = Tokens.random("guarded-")
        let added = try fleet.client(0).call(Tokens.addCall(user: "guarded", access: token, refresh: nil, readers: ["uid:0"]))
        #expect(added.errorName == nil, "\(added)")
        try await fleet.database.psql(
            """
            UPDATE tokend_credentials SET readers = '["uid:0","uid:7001"]', generation = nextval('tokend_generation')
            WHERE user_identifier = 'guarded'
            """)
        // The node reloads the row it was notified of, and refuses it.
        #expect(
            try await fleet.eventually(.seconds(15)) {
                Self.integrityFailures(fleet, node: 0, kind: "altered") >= 1
            }, "the altered row was counted: \(fleet.logs)")
        let stolen = try await OtherUser.call(Tokens.tokenCall(user: "guarded"), socket: fleet.nodes[0].socketPath, uid: 7001, gid: 7001)
        #expect(stolen.accessToken == nil, "uid 7001 got the token: \(stolen)")
        #expect(fleet.nodes[0].log.contains("integrity"), "the refusal is logged: \(fleet.logs)")
        // A node started after the edit does not serve the row at all.
        _ = try await fleet.nodes[0].stop()
        let directory = fleet.nodes[0].directory
        fleet.nodes[0] = try DaemonProcess(
            configuration: try String(contentsOfFile: directory.file("tokend.toml"), encoding: .utf8), directory: directory)
        try await fleet.nodes[0].start()
        let afterRestart = try await OtherUser.call(
            Tokens.tokenCall(user: "guarded"), socket: fleet.nodes[0].socketPath, uid: 7001, gid: 7001)
        #expect(afterRestart.accessToken == nil, "uid 7001 got the token from a fresh node: \(afterRestart)")
        #expect(!fleet.nodes[0].log.contains(token))
        await fleet.stop()
    }

    /// A row saved while uid 7002 was a reader, written back after an administrator replaced
    /// the credential without that reader: refused, logged and counted on every node that saw
    /// the newer row, and uid 7002 gets nothing.
    @Test func anOldRowWrittenBackIsRefused() async throws {
        let fleet = try await Fleet(count: 2, lifetime: 3600, metrics: Self.metricsConfiguration)
        let old = Tokens.random("old-")
        let first = try fleet.client(0).call(Tokens.addCall(user: "rolled", access: old, refresh: nil, readers: ["uid:0", "uid:7002"]))
        #expect(first.errorName == nil, "\(first)")
        try await fleet.database.psql("CREATE TABLE saved AS SELECT * FROM tokend_credentials WHERE user_identifier = 'rolled'")
        let new = Tokens.random("new-")
        let replaced = try fleet.client(0).call(Self.replaceCall(user: "rolled", access: new, readers: ["uid:0"]))
        #expect(replaced.errorName == nil, "\(replaced)")
        #expect(
            try await fleet.eventually(.seconds(10)) { try fleet.client(1).call(Tokens.tokenCall(user: "rolled")).accessToken == new })
        try await fleet.database.psql(
            "DELETE FROM tokend_credentials WHERE user_identifier = 'rolled'; INSERT INTO tokend_credentials SELECT * FROM saved")
        for node in 0..<2 {
            #expect(
                try await fleet.eventually(.seconds(15)) {
                    Self.integrityFailures(fleet, node: node, kind: "rolled_back") >= 1
                }, "node \(node) counted the rollback: \(fleet.logs)")
            #expect(fleet.nodes[node].log.contains("rolled back"), "node \(node) logged the rollback")
            let reply = try await OtherUser.call(
                Tokens.tokenCall(user: "rolled"), socket: fleet.nodes[node].socketPath, uid: 7002, gid: 7002)
            #expect(reply.accessToken == nil, "node \(node) gave uid 7002 a token: \(reply)")
        }
        await fleet.stop()
    }

    /// Notifications off and a long reconciliation interval: node 0 has not seen the credential
    /// uid 7003 enrolled on node 1. uid 7004 asks node 0 to replace it: refused, and the row is
    /// still uid 7003's.
    @Test func aNodeThatHasNotSeenACredentialCannotLetAnotherUidReplaceIt() async throws {
        let fleet = try await Fleet(count: 2, lifetime: 3600, reconcile: "1h")
        try await fleet.database.psql("ALTER TABLE tokend_credentials DISABLE TRIGGER tokend_credentials_notify")
        let victim = Tokens.random("victim-")
        let enrolled = try await OtherUser.call(
            Tokens.addCall(user: "victim", access: victim, refresh: nil), socket: fleet.nodes[1].socketPath, uid: 7003, gid: 7003)
        #expect(enrolled.errorName == nil, "\(enrolled)")
        let attacker = Tokens.random("attacker-")
        let replace = try await OtherUser.call(
            Self.replaceCall(user: "victim", access: attacker, readers: nil), socket: fleet.nodes[0].socketPath, uid: 7004, gid: 7004)
        #expect(replace.errorName == "io.tokend.TokenProvider.PermissionDenied", "\(replace)")
        #expect(try await fleet.database.psql("SELECT enrolled_uid FROM tokend_credentials WHERE user_identifier = 'victim'") == "7003")
        let own = try await OtherUser.call(Tokens.tokenCall(user: "victim"), socket: fleet.nodes[1].socketPath, uid: 7003, gid: 7003)
        #expect(own.accessToken == victim, "\(own)")
        // Removing it through node 0 is refused too.
        let remove = try await OtherUser.call(
            #"{"method":"io.tokend.TokenProvider.RemoveCredential","parameters":{"userIdentifier":"victim"}}"#,
            socket: fleet.nodes[0].socketPath, uid: 7004, gid: 7004)
        #expect(remove.errorName != nil, "\(remove)")
        #expect(try await fleet.database.psql("SELECT count(*) FROM tokend_credentials WHERE user_identifier = 'victim'") == "1")
        await fleet.stop()
    }

    /// A node with `tls = "verify-full"` talks to the database over TLS only; when the
    /// database answers without TLS (a downgrade on the path) the node does not start.
    @Test func aNodeWithVerifyFullUsesTLSAndRefusesADowngrade() async throws {
        let fleet = try await Fleet(count: 1, lifetime: 3600) { database in
            "tls = \"verify-full\"\ntls_ca_file = \"\(try await database.enableTLS())\""
        }
        try await fleet.add("over-tls", lifetime: 3600)
        #expect(try fleet.client(0).call(Tokens.tokenCall(user: "over-tls")).accessToken != nil)
        let sessions = try await fleet.database.psql(
            "SELECT count(*), bool_and(s.ssl) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) WHERE a.application_name = 'tokend node-0'"
        )
        #expect(sessions.hasSuffix("|t") && !sessions.hasPrefix("0|"), "the node's sessions: \(sessions)")
        _ = try await fleet.nodes[0].stop()
        try await fleet.database.stop()
        fleet.database.serverOptions = []
        try await fleet.database.start()
        let directory = fleet.nodes[0].directory
        fleet.nodes[0] = try DaemonProcess(
            configuration: try String(contentsOfFile: directory.file("tokend.toml"), encoding: .utf8), directory: directory)
        await #expect(throws: (any Error).self, "a node started against a database without TLS") {
            try await fleet.nodes[0].start(timeout: .seconds(30))
        }
        #expect(
            fleet.nodes[0].log.contains("the shared store's database: the server does not offer TLS"), "\(fleet.nodes[0].log.suffix(2000))")
        await fleet.stop()
    }

    /// `AddCredential` with `replace: true`.
    static func replaceCall(user: String, access: String, readers: [String]?) -> String {
        var parameters: [String: Any] = [
            "userIdentifier": user, "provider": "example", "accessToken": access, "expiresIn": 3600, "replace": true,
        ]
        if let readers { parameters["readers"] = readers }
        let call: [String: Any] = ["method": "io.tokend.TokenProvider.AddCredential", "parameters": parameters]
        return String(decoding: try! JSONSerialization.data(withJSONObject: call), as: UTF8.self)
    }
}

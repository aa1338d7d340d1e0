import Foundation
import Testing
import TokendTestSupport

/// Warnings ahead of a login's end (issue 31), against the real IdP: a 40 s login
/// (`max_session_age`) with warnings at 30 s and 10 s before its end.
@Suite(.serialized)
struct ReloginWarningTests {
    /// The uid that reads `alice` (not `bob`).
    static let reader: UInt32 = 7310
    static let providerExtra = """
        max_session_age = "40s"
        relogin_warning = ["30s", "10s"]
        """

    /// Follows `WatchReloginWarnings` for `seconds` and prints each reply on a line.
    static let watcherScript = #"""
        import socket, sys, time
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(sys.argv[1])
        s.sendall(b'{"method":"io.tokend.TokenProvider.WatchReloginWarnings","parameters":{},"more":true}\0')
        end = time.time() + float(sys.argv[2])
        data = b""
        while time.time() < end:
            s.settimeout(max(0.1, end - time.time()))
            try:
                chunk = s.recv(65536)
            except socket.timeout:
                break
            if not chunk:
                break
            data += chunk
            while b"\0" in data:
                message, data = data.split(b"\0", 1)
                sys.stdout.write(message.decode() + "\n")
                sys.stdout.flush()
        """#

    static func watcher(socket: String, seconds: Int, uid: UInt32? = nil) throws -> StreamingCommand {
        guard let uid else { return try StreamingCommand("/usr/bin/python3", ["-c", watcherScript, socket, "\(seconds)"]) }
        return try StreamingCommand(
            "/usr/bin/setpriv",
            ["--reuid=\(uid)", "--regid=\(uid)", "--clear-groups", "/usr/bin/python3", "-c", watcherScript, socket, "\(seconds)"])
    }

    /// The warnings of each streamed reply, as `user threshold`.
    static func warnings(_ lines: [String]) throws -> [[String]] {
        try lines.map { line in
            let reply = try RawClient.object(line)
            let parameters = reply["parameters"] as? [String: Any] ?? [:]
            let warnings = parameters["warnings"] as? [[String: Any]] ?? []
            return warnings.map { "\($0["userIdentifier"] ?? "?") \($0["threshold"] ?? "?")" }
        }
    }

    static func journalLines(_ log: String, threshold: String) -> [String] {
        log.split(separator: "\n").map(String.init).filter {
            $0.contains("credential needs a new login soon") && $0.contains("threshold=\(threshold)")
        }
    }

    static func add(_ user: String, readers: [String], setup: IdPDaemon, client: RawClient) async throws {
        let minted = try await setup.idp.mint(count: 1, lifetime: 3600)[0]
        let reply = try client.call(
            Tokens.addCall(
                user: user, access: minted["access_token"] as! String, refresh: minted["refresh_token"] as? String, readers: readers))
        guard reply.errorName == nil else { throw TestFailure("AddCredential failed: \(reply)") }
    }

    @Test func warningsReachTheJournalAndTheWatchersWhoMayReadThem() async throws {
        guard IdentityProvider.isAvailable else { return }
        let setup = try await IdPDaemon.start(providerExtra: Self.providerExtra + ScrapedMetrics.configuration)
        defer { _ = Task { try? await setup.stop() } }
        let socket = setup.daemon.socketPath
        let admin = try Self.watcher(socket: socket, seconds: 60)
        let reader = try Self.watcher(socket: socket, seconds: 60, uid: Self.reader)
        // Both see an empty first reply: nothing is in force yet.
        _ = try await admin.waitForLines(1)
        _ = try await reader.waitForLines(1)
        let client = try RawClient(path: socket)
        let grantsBefore = try await setup.idp.postCount()
        let addingAlice = Date()
        try await Self.add("alice", readers: ["uid:\(Self.reader)"], setup: setup, client: client)
        let aliceAdded = Date()
        try await Self.add("bob", readers: ["uid:7311"], setup: setup, client: client)

        // Status: the date is the login's end.
        let status = try OAuthRefreshTests.status(client, "alice")
        let reloginBy = try #require(status["reloginBy"] as? Int)
        #expect(status["reloginReason"] as? String == "session_end")
        #expect(reloginBy == status["sessionEndsAt"] as? Int)
        // The login began while alice was being added (however long that took on a loaded machine).
        let earliest = addingAlice.timeIntervalSince1970 + 40 - 1
        let latest = aliceAdded.timeIntervalSince1970 + 40 + 1
        #expect(Double(reloginBy) >= earliest && Double(reloginBy) <= latest, "\(reloginBy) not in \(earliest)...\(latest)")
        // The gauge: seconds until the provider's earliest re-login date.
        let gauge = try #require(
            try ScrapedMetrics.scrape(setup.directory)[#"tokend_credential_relogin_deadline_seconds{provider="example"}"#])
        #expect(gauge > 20 && gauge <= 41, "\(gauge)")

        // The journal: the 30 s warning of each, then the 10 s one, once each.
        try await pollUntil(timeout: .seconds(45), "the 10 s warnings in the journal: \(setup.daemon.log.suffix(3000))") {
            Self.journalLines(setup.daemon.log, threshold: "10s").count >= 2
        }
        let early = Self.journalLines(setup.daemon.log, threshold: "30s")
        #expect(early.count == 2, "\(early)")
        let line = try #require(early.first { $0.contains("user_identifier=alice") })
        for field in ["provider=example", "relogin_by=\(reloginBy)", "reason=session_end", "command=tokenctl login alice"] {
            #expect(line.contains(field), "\(field) in \(line)")
        }
        #expect(Self.journalLines(setup.daemon.log, threshold: "10s").count == 2)

        // The streams: the administrator hears all four; alice's reader only alice's two.
        _ = try await admin.waitForLines(5)
        _ = try await reader.waitForLines(3)
        let heard = try Self.warnings(admin.lines)
        #expect(heard.first == [])
        #expect(Set(heard.dropFirst().flatMap { $0 }) == ["alice 30s", "bob 30s", "alice 10s", "bob 10s"])
        #expect(heard.count == 5, "\(admin.lines)")
        let heardByReader = try Self.warnings(reader.lines)
        #expect(heardByReader == [[], ["alice 30s"], ["alice 10s"]], "\(reader.lines)")

        // The login ends at 40 s; nothing refreshes it meanwhile or after.
        try await pollUntil(timeout: .seconds(20), "alice's login has ended") {
            (try OAuthRefreshTests.status(client, "alice")["state"] as? String) == "reauthentication_required"
        }
        let grants = try await setup.idp.postCount() - grantsBefore
        #expect(grants <= 2, "\(grants) grants")
        kill(admin.processIdentifier, SIGKILL)
        kill(reader.processIdentifier, SIGKILL)
    }

    /// The hook runs once per warning with the warning in its environment and no token; a
    /// restart between the two thresholds neither repeats the first nor skips the second; a
    /// watcher connecting after the restart is told the warning in force.
    @Test func aRestartBetweenThresholdsNeitherRepeatsNorSkips() async throws {
        guard IdentityProvider.isAvailable else { return }
        let hooks = try ScratchDirectory()
        let output = hooks.file("hook.out")
        try hooks.write(
            "hook.sh",
            """
            #!/bin/sh
            echo "$TOKEND_CREDENTIAL $TOKEND_THRESHOLD $TOKEND_PROVIDER $TOKEND_OWNER_UID $TOKEND_RELOGIN_BY $TOKEND_RELOGIN_REASON $#" >> \(output)
            env >> \(hooks.file("hook.env"))
            """, mode: 0o755)
        func hookLines() -> [String] {
            ((try? String(contentsOfFile: output, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
        }
        let setup = try await IdPDaemon.start(providerExtra: Self.providerExtra + "\nrelogin_command = \"\(hooks.file("hook.sh"))\"")
        defer { _ = Task { try? await setup.stop() } }
        let client = try RawClient(path: setup.daemon.socketPath)
        let minted = try await setup.idp.mint(count: 1, lifetime: 3600)[0]
        let access = minted["access_token"] as! String
        let refresh = minted["refresh_token"] as? String
        #expect(
            try client.call(Tokens.addCall(user: "alice", access: access, refresh: refresh, readers: ["uid:\(Self.reader)"])).errorName
                == nil)
        let reloginBy = try #require(try OAuthRefreshTests.status(client, "alice")["reloginBy"] as? Int)

        try await pollUntil(timeout: .seconds(30), "the first warning's hook: \(setup.daemon.log.suffix(2000))") { hookLines().count >= 1 }
        #expect(hookLines() == ["alice 30s example \(Self.reader) \(reloginBy) session_end 0"])
        let environment = (try? String(contentsOfFile: hooks.file("hook.env"), encoding: .utf8)) ?? ""
        #expect(!environment.contains(access))
        if let refresh { #expect(!environment.contains(refresh)) }

        // Restart, well before the 10 s threshold.
        let configuration = try String(contentsOfFile: setup.directory.file("tokend.toml"), encoding: .utf8)
        _ = try await setup.daemon.stop()
        let restarted = try DaemonProcess(configuration: configuration, directory: setup.directory)
        try await restarted.start()
        defer { _ = Task { try? await restarted.stop() } }
        let watcher = try Self.watcher(socket: restarted.socketPath, seconds: 40)
        let first = try await watcher.waitForLines(1)
        #expect(try Self.warnings([first[0]]) == [["alice 30s"]], "the warning in force: \(first)")

        try await pollUntil(timeout: .seconds(40), "the second warning's hook: \(restarted.log.suffix(2000))") { hookLines().count >= 2 }
        _ = try await watcher.waitForLines(2)
        #expect(try Self.warnings(watcher.lines) == [["alice 30s"], ["alice 10s"]])
        #expect(hookLines().map { $0.split(separator: " ").prefix(2).joined(separator: " ") } == ["alice 30s", "alice 10s"])
        #expect(Self.journalLines(restarted.log, threshold: "30s").isEmpty, "said again after the restart")
        #expect(Self.journalLines(restarted.log, threshold: "10s").count == 1)
        // Nothing more after the login's end.
        try await pollUntil(timeout: .seconds(20), "alice's login has ended") {
            (try OAuthRefreshTests.status(try RawClient(path: restarted.socketPath), "alice")["state"] as? String)
                == "reauthentication_required"
        }
        #expect(hookLines().count == 2)
        kill(watcher.processIdentifier, SIGKILL)
    }

    /// A hook that fails or hangs is logged, named, and killed after its timeout.
    @Test func aFailingOrHangingHookIsLogged() async throws {
        guard IdentityProvider.isAvailable else { return }
        let hooks = try ScratchDirectory()
        try hooks.write("hang.sh", "#!/bin/sh\nsleep 30\n", mode: 0o755)
        let setup = try await IdPDaemon.start(
            providerExtra: """
                max_session_age = "20s"
                relogin_warning = ["15s"]
                relogin_command = "\(hooks.file("hang.sh"))"
                relogin_command_timeout = "1s"

                [metrics]
                listen = "unix:metrics.sock"
                per_credential_labels = true
                """)
        defer { _ = Task { try? await setup.stop() } }
        let client = try RawClient(path: setup.daemon.socketPath)
        try await Self.add("alice", readers: ["uid:\(Self.reader)"], setup: setup, client: client)
        try await pollUntil(timeout: .seconds(20), "the hook's timeout in the log: \(setup.daemon.log.suffix(2000))") {
            setup.daemon.log.contains("relogin_command did not finish within 1s and was killed")
        }
        #expect(Self.journalLines(setup.daemon.log, threshold: "15s").count == 1)
        // A gauge per credential when per_credential_labels is on.
        let samples = try ScrapedMetrics.scrape(setup.directory)
        let perCredential = samples.filter {
            $0.key.hasPrefix("tokend_credential_relogin_deadline_seconds{") && $0.key.contains(#"credential="alice""#)
        }
        #expect(perCredential.count == 1, "\(samples.keys.sorted())")
    }

    /// A refresh token that is a JWT expiring `at` (seconds since the epoch).
    static func refreshToken(expiringAt at: Int) -> String {
        "eyJhbGciOiJub25lIn0."
            + Data(#"{"exp":\#(at)}"#.utf8).base64EncodedString()
            .replacingOccurrences(of: "=", with: "").replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            + ".c2ln"
    }

    /// `per_credential_labels = true` adds a re-login gauge per credential beside the provider's,
    /// which the shipped alerts watch: it does not replace it.
    @Test func perCredentialGaugesComeBesideTheProvidersOwn() async throws {
        let daemon = try DaemonProcess(
            configuration: DaemonProcess.configuration() + ScrapedMetrics.configuration + "\nper_credential_labels = true\n")
        try await daemon.start()
        defer { _ = Task { try? await daemon.stop() } }
        let client = try RawClient(path: daemon.socketPath)
        let now = Int(Date().timeIntervalSince1970)
        for (user, days) in [("carol", 3), ("dave", 5)] {
            let refresh = Self.refreshToken(expiringAt: now + days * 86_400)
            #expect(try client.call(Tokens.addCall(user: user, access: Tokens.random("a-"), refresh: refresh)).errorName == nil)
        }
        let samples = try ScrapedMetrics.scrape(daemon.directory)
        let name = "tokend_credential_relogin_deadline_seconds"
        let provider = try #require(samples[#"\#(name){provider="example"}"#], "\(samples.keys.sorted())")
        #expect(abs(provider - 3 * 86_400) < 120, "the provider's earliest date: \(provider)")
        let carol = try #require(samples.first { $0.key.hasPrefix(name + "{") && $0.key.contains(#"credential="carol""#) }?.value)
        let dave = try #require(samples.first { $0.key.hasPrefix(name + "{") && $0.key.contains(#"credential="dave""#) }?.value)
        #expect(abs(carol - 3 * 86_400) < 120 && abs(dave - 5 * 86_400) < 120, "carol \(carol), dave \(dave)")
        #expect(samples.keys.filter { $0.hasPrefix(name + "{") }.count == 3, "\(samples.keys.sorted())")
    }

    /// A JWT refresh token's `exp` is the re-login date when nothing ends the login earlier.
    @Test func aJWTRefreshTokensExpIsTheReloginDate() async throws {
        let daemon = try DaemonProcess()
        try await daemon.start()
        defer { _ = Task { try? await daemon.stop() } }
        let client = try RawClient(path: daemon.socketPath)
        let exp = Int(Date().timeIntervalSince1970) + 3 * 86_400
        let refresh =
            "eyJhbGciOiJub25lIn0."
            + Data(#"{"exp":\#(exp)}"#.utf8).base64EncodedString()
            .replacingOccurrences(of: "=", with: "").replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            + ".c2ln"
        #expect(try client.call(Tokens.addCall(user: "carol", access: Tokens.random("a-"), refresh: refresh)).errorName == nil)
        let status = try OAuthRefreshTests.status(client, "carol")
        #expect(status["reloginBy"] as? Int == exp, "\(status)")
        #expect(status["reloginReason"] as? String == "refresh_token_expiry")
        // Without a refresh token, the token itself ends: its expires_in (3600 s) before max_token_age.
        #expect(try client.call(Tokens.addCall(user: "dave", access: Tokens.random("a-"), refresh: nil)).errorName == nil)
        let dave = try OAuthRefreshTests.status(client, "dave")
        #expect(dave["reloginReason"] as? String == "token_expiry", "\(dave)")
        #expect(dave["reloginBy"] as? Int == dave["expiresAt"] as? Int)
    }

    /// Two nodes of a shared store: each warning is recorded once for both, so it is said once
    /// in all (by the node whose write of the record won), never by both.
    @Test(.enabled(if: PostgresServer.isAvailable, "needs PostgreSQL 15 and root"))
    func withASharedStoreEachWarningIsSaidOnceAcrossTheNodes() async throws {
        guard IdentityProvider.isAvailable else { return }
        let fleet = try await SharedStoreTests.Fleet(count: 2, lifetime: 3600, providerExtra: Self.providerExtra)
        defer { _ = Task { await fleet.stop() } }
        try await fleet.add("alice", lifetime: 3600)
        func said(_ threshold: String) -> Int { fleet.nodes.map { Self.journalLines($0.log, threshold: threshold).count }.reduce(0, +) }
        try await pollUntil(timeout: .seconds(45), "the 10 s warning: \(fleet.logs)") { said("10s") >= 1 }
        // Time for a second node to say it too, if it were going to.
        try await Task.sleep(for: .seconds(2))
        #expect(said("30s") == 1, "\(fleet.logs)")
        #expect(said("10s") == 1, "\(fleet.logs)")
    }
}

import Foundation
import Testing

/// Providers of kind `exec`: a local command refreshes the token. Also used to mint JWTs with
/// any `iat`, to test the age caps with no clock hook in the binary.
@Suite(.serialized)
struct ExecProviderTests {
    /// A refresher script: records what it was given, then prints a response built by `body`
    /// (a Python expression over `req`, the parsed stdin, and `now`).
    static func script(in directory: ScratchDirectory, name: String = "refresh", exitCode: Int = 0, sleep: Int = 0, output: String) throws
        -> String
    {
        let text = """
            #!/usr/bin/python3
            import json, os, sys, time, base64
            raw = sys.stdin.read()
            req = json.loads(raw)
            now = int(time.time())
            def b64(d): return base64.urlsafe_b64encode(json.dumps(d).encode()).rstrip(b"=").decode()
            def jwt(claims): return b64({"alg": "RS256", "typ": "JWT"}) + "." + b64(claims) + ".c2ln"
            with open(\(String(reflecting: directory.file(name + ".calls"))), "a") as f:
                f.write(json.dumps({"argv": sys.argv, "env": dict(os.environ), "stdin": req}) + "\\n")
            time.sleep(\(sleep))
            sys.stdout.write(\(output))
            sys.exit(\(exitCode))
            """
        try directory.write(name, text, mode: 0o755)
        return directory.file(name)
    }

    static func config(command: String, extra: String = "", daemonExtra: String = "") -> String {
        DaemonProcess.configuration(
            extraDaemon: "forced_refresh_interval = \"1s\"\n" + daemonExtra,
            providers: """
                [providers.example]
                kind = "exec"
                command = ["\(command)"]
                timeout = "2s"
                \(extra)
                """)
    }

    static func calls(_ directory: ScratchDirectory, name: String = "refresh") -> [[String: Any]] {
        let text = (try? String(contentsOfFile: directory.file(name + ".calls"), encoding: .utf8)) ?? ""
        return text.split(separator: "\n").compactMap { try? RawClient.object(String($0)) }
    }

    @Test func refreshesThroughTheCommandWithSecretsOnlyOnStdin() async throws {
        let directory = try ScratchDirectory()
        let command = try Self.script(
            in: directory,
            output:
                #"json.dumps({"access_token": "fresh-" + req["userIdentifier"] + "-" + str(now), "refresh_token": "rotated-refresh-1", "expires_in": 3600})"#
        )
        let daemon = try DaemonProcess(configuration: Self.config(command: command), directory: directory)
        try await daemon.start()
        let client = try RawClient(path: daemon.socketPath)
        let refresh = Tokens.random("initial-refresh-")
        #expect(
            try client.call(Tokens.addCall(user: "ex", access: Tokens.random("old-"), refresh: refresh, expiresIn: 20)).errorName == nil)
        let reply = try client.call(Tokens.tokenCall(user: "ex", minValid: 600))
        #expect(reply.accessToken?.hasPrefix("fresh-ex-") == true, "\(reply)")
        let calls = Self.calls(directory)
        try #require(calls.count == 1)
        #expect((calls[0]["stdin"] as? [String: Any])?["refreshToken"] as? String == refresh)
        let argvAndEnv = "\(calls[0]["argv"] ?? "") \(calls[0]["env"] ?? "")"
        #expect(!argvAndEnv.contains(refresh), "the refresh token must not be in argv or the environment")
        // The rotated refresh token is what the next refresh receives.
        _ = try client.call(Tokens.tokenCall(user: "ex", rejected: reply.accessToken))
        try await Task.sleep(for: .milliseconds(1100))
        _ = try client.call(Tokens.tokenCall(user: "ex", rejected: reply.accessToken))
        let later = Self.calls(directory)
        #expect((later.last?["stdin"] as? [String: Any])?["refreshToken"] as? String == "rotated-refresh-1")
        #expect(!daemon.log.contains(refresh) && !daemon.log.contains("rotated-refresh-1"))
        try await daemon.stop()
    }

    @Test(arguments: [
        (1, 0, #"'oops'"#, "exited with status 1"),
        (0, 5, #"'{}'"#, "did not finish within 2s"),
        (0, 0, #"'<html>not json</html>'"#, "not valid JSON"),
        (0, 0, #"json.dumps({"token_type": "Bearer"})"#, "no access_token"),
    ])
    func failuresAreReportedAndTheCurrentTokenStaysUsable(exitCode: Int, sleep: Int, output: String, expected: String) async throws {
        let directory = try ScratchDirectory()
        let command = try Self.script(in: directory, exitCode: exitCode, sleep: sleep, output: output)
        let daemon = try DaemonProcess(configuration: Self.config(command: command), directory: directory)
        try await daemon.start()
        let client = try RawClient(path: daemon.socketPath)
        let access = Tokens.random("still-good-")
        #expect(try client.call(Tokens.addCall(user: "ex", access: access, refresh: "r", expiresIn: 120)).errorName == nil)
        let started = ContinuousClock.now
        let reply = try client.call(Tokens.tokenCall(user: "ex", minValid: 600))
        #expect(reply.errorName == "io.tokend.TokenProvider.RefreshFailed", "\(reply)")
        #expect((reply.parameters["reason"] as? String)?.contains(expected) == true, "\(reply)")
        #expect(reply.parameters["retryAt"] is Int)
        #expect(ContinuousClock.now - started < .seconds(5))
        // What the caller can still use keeps being served.
        #expect(try client.call(Tokens.tokenCall(user: "ex", minValid: 60)).accessToken == access)
        let status = try client.call(#"{"method":"io.tokend.TokenProvider.Status","parameters":{"userIdentifier":"ex"}}"#)
        let credential = (status.parameters["credentials"] as? [[String: Any]])?.first ?? [:]
        #expect(credential["state"] as? String == "retrying")
        #expect((credential["lastError"] as? String)?.contains(expected) == true)
        try await daemon.stop()
    }

    @Test func invalidGrantFromTheCommandMeansReauthentication() async throws {
        let directory = try ScratchDirectory()
        let command = try Self.script(
            in: directory, exitCode: 1, output: #"json.dumps({"error": "invalid_grant", "error_description": "session revoked"})"#)
        let daemon = try DaemonProcess(configuration: Self.config(command: command), directory: directory)
        try await daemon.start()
        let client = try RawClient(path: daemon.socketPath)
        #expect(try client.call(Tokens.addCall(user: "ex", access: Tokens.random("a-"), refresh: "r", expiresIn: 120)).errorName == nil)
        let reply = try client.call(Tokens.tokenCall(user: "ex", minValid: 600))
        #expect(reply.errorName == "io.tokend.TokenProvider.ReauthenticationRequired")
        #expect((reply.parameters["reason"] as? String) == "invalid_grant: session revoked")
        // Not served any more, and not retried.
        #expect(try client.call(Tokens.tokenCall(user: "ex")).errorName == "io.tokend.TokenProvider.ReauthenticationRequired")
        try await Task.sleep(for: .milliseconds(1500))
        #expect(Self.calls(directory).count == 1)
        try await daemon.stop()
    }

    @Test func proactiveRefreshHappensBeforeExpiryWithoutAnyCaller() async throws {
        let directory = try ScratchDirectory()
        let command = try Self.script(in: directory, output: #"json.dumps({"access_token": "proactive-" + str(now), "expires_in": 4})"#)
        let daemon = try DaemonProcess(configuration: Self.config(command: command, extra: "refresh_margin = \"1s\""), directory: directory)
        try await daemon.start()
        let client = try RawClient(path: daemon.socketPath)
        let first = Tokens.random("first-")
        #expect(try client.call(Tokens.addCall(user: "ex", access: first, refresh: "r", expiresIn: 4)).errorName == nil)
        // Due at about 80% of 4 s; refreshed again and again after that — the second grant ~6.5 s
        // in (jitter moves it), so on a loaded machine it is waited for, up to 20 s.
        var calls = Self.calls(directory)
        for _ in 0..<40 where calls.count < 2 {
            try await Task.sleep(for: .milliseconds(500))
            calls = Self.calls(directory)
        }
        #expect(calls.count >= 2, "expected repeated proactive refreshes, saw \(calls.count)")
        let reply = try client.call(Tokens.tokenCall(user: "ex"))
        #expect(reply.accessToken?.hasPrefix("proactive-") == true)
        // Never served expired: the token always had time left.
        let expiresAt = (reply.parameters["credentials"] as? [String: Any])?["expiresAt"] as? Int ?? 0
        #expect(expiresAt >= Int(Date().timeIntervalSince1970))
        try await daemon.stop()
    }

    @Test func maxTokenAgeCountsFromTheJWTsIat() async throws {
        let directory = try ScratchDirectory()
        // Every refreshed token is a JWT issued 3500 s ago that claims a day of life.
        let command = try Self.script(
            in: directory,
            output: #"json.dumps({"access_token": jwt({"iat": now - 3500, "exp": now + 86400, "n": now}), "expires_in": 86400})"#)
        let daemon = try DaemonProcess(configuration: Self.config(command: command, extra: "max_token_age = \"1h\""), directory: directory)
        try await daemon.start()
        let client = try RawClient(path: daemon.socketPath)
        #expect(try client.call(Tokens.addCall(user: "ex", access: Tokens.random("a-"), refresh: "r", expiresIn: 5)).errorName == nil)
        let reply = try client.call(Tokens.tokenCall(user: "ex", minValid: 60))
        let credentials = reply.parameters["credentials"] as? [String: Any] ?? [:]
        let issuedAt = credentials["issuedAt"] as? Int ?? 0
        #expect(abs(issuedAt - (Int(Date().timeIntervalSince1970) - 3500)) <= 3)
        #expect(credentials["expiresAt"] as? Int == issuedAt + 3600, "deadline = iat + max_token_age, not exp")
        try await daemon.stop()
    }

    @Test func maxSessionAgeEndsTheLoginWhateverTheRefreshes() async throws {
        let directory = try ScratchDirectory()
        let command = try Self.script(
            in: directory, output: #"json.dumps({"access_token": "renewed-" + str(time.time()), "expires_in": 3600})"#)
        let daemon = try DaemonProcess(
            configuration: Self.config(command: command, extra: "max_session_age = \"5s\"\nsession_warning = \"3s\""), directory: directory
        )
        try await daemon.start()
        let client = try RawClient(path: daemon.socketPath)
        #expect(try client.call(Tokens.addCall(user: "ex", access: Tokens.random("a-"), refresh: "r", expiresIn: 3600)).errorName == nil)
        let early = try client.call(Tokens.tokenCall(user: "ex"))
        let expiresAt = (early.parameters["credentials"] as? [String: Any])?["expiresAt"] as? Int ?? 0
        #expect(expiresAt <= Int(Date().timeIntervalSince1970) + 5, "served no later than the login's end")
        let status = try client.call(#"{"method":"io.tokend.TokenProvider.Status","parameters":{"userIdentifier":"ex"}}"#)
        #expect((status.parameters["credentials"] as? [[String: Any]])?.first?["sessionEndsAt"] is Int)
        try await Task.sleep(for: .seconds(6))
        let late = try client.call(Tokens.tokenCall(user: "ex"))
        #expect(late.errorName == "io.tokend.TokenProvider.ReauthenticationRequired", "\(late)")
        #expect((late.parameters["reason"] as? String)?.contains("maximum age") == true)
        #expect(daemon.log.contains("login ends soon"))
        try await daemon.stop()
    }
}

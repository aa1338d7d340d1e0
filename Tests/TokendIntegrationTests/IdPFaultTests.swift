import Foundation
import Testing

/// The identity provider misbehaving (issue 8, point 3), through `Tests/idp/faultproxy.py` in
/// front of the real test IdP. Complements `OAuthRefreshTests.brokenResponsesNeverReplaceAGoodToken`
/// (malformed JSON, 200 without `access_token`, HTML, hang, reset mid-answer) with: the server
/// down, connections dropped before any answer, truncated bodies, 429/503 with `Retry-After`, a
/// slow server, a token for another user, and a server echoing the refresh token in its error.
@Suite(.serialized)
struct IdPFaultTests {
    static let callTimeout = 3
    static let users = ["alice", "bob", "carol", "dave"]
    /// Tokens the faults produce; never to be served or stored.
    static let garbage = ["TrUnC4t3d", "AbC123"]

    /// Sends `calls` (one per connection) at once and returns each reply with how long it took.
    static func concurrently(_ calls: [String], socket: String) throws -> [(reply: [String: Any], seconds: Double)] {
        let clients = try calls.map { _ in try RawClient(path: socket) }
        let started = ContinuousClock.now
        for (client, call) in zip(clients, calls) { try client.send(call) }
        return try clients.map { client in
            let reply = try RawClient.object(try #require(try client.receive()))
            let elapsed = ContinuousClock.now - started
            return (reply, Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18)
        }
    }

    @Test(arguments: ["down", "close", "truncated", "status:429", "status:503", "slow:5"])
    func everyCallIsAnsweredInTimeAndTheStoreKeepsGoodTokens(mode: String) async throws {
        let (setup, proxy) = try await IdPDaemon.startBehindProxy(
            idpOptions: .init(refreshGrace: 30),
            daemonExtra:
                "http_timeout = \"8s\"\ncall_timeout = \"\(Self.callTimeout)s\"\nretry_initial = \"30s\"\nforced_refresh_interval = \"1s\""
        )
        let daemon = setup.daemon
        let client = try RawClient(path: daemon.socketPath)
        var good: Set<String> = []
        for user in Self.users {
            let minted = try await setup.addMinted(user, lifetime: 120, client: client)
            good.insert(minted["access_token"] as! String)
        }
        let retryAfter = mode == "status:429" ? 40 : 2
        if mode == "down" {
            try await proxy.bringDown()
        } else {
            try await proxy.set(["mode": mode, "retry_after": retryAfter])
        }
        // Five callers per credential, all needing more validity than the tokens have.
        let calls = Self.users.flatMap { user in Array(repeating: Tokens.tokenCall(user: user, minValid: 600), count: 5) }
        let sentAt = Int(Date().timeIntervalSince1970)
        let answers = try Self.concurrently(calls, socket: daemon.socketPath)
        for (reply, seconds) in answers {
            #expect(seconds < Double(Self.callTimeout) + 2, "\(mode): answered after \(seconds) s: \(reply)")
            if let token = reply.accessToken {
                // Only a slow server's grant may finish in time, and its token is a real one.
                // Otherwise a token is the current, still valid one: a caller that arrives after
                // a failed grant, inside forced_refresh_interval, is served it rather than
                // starting another grant (the per-credential limit on caller-triggered refreshes).
                #expect(!Self.garbage.contains(token), "\(mode): \(reply)")
                if !mode.hasPrefix("slow") { #expect(good.contains(token), "\(mode): only the good token: \(reply)") }
                good.insert(token)
            } else {
                #expect(reply.errorName == "io.tokend.TokenProvider.RefreshFailed", "\(mode): \(reply)")
            }
            if mode.hasPrefix("status:"), let retryAt = reply.parameters["retryAt"] as? Int {
                #expect(retryAt >= sentAt + retryAfter - 1, "\(mode): Retry-After honoured: \(retryAt - sentAt) s")
            }
        }
        if mode.hasPrefix("status:") {
            #expect(answers.contains { $0.reply.parameters["retryAt"] is Int }, "\(mode): retryAt reported")
        }
        // Valid tokens keep being served while the server misbehaves.
        for user in Self.users {
            let token = try client.call(Tokens.tokenCall(user: user)).accessToken
            #expect(token.map(good.contains) == true, "\(mode): \(user) is served a good token")
        }
        // Let a slow grant finish, then check the store itself: restart and read every token.
        if mode.hasPrefix("slow") { try await Task.sleep(for: .seconds(6)) }
        var served: [String: String] = [:]
        for user in Self.users {
            if let token = try client.call(Tokens.tokenCall(user: user)).accessToken {
                good.insert(token)  // a completed slow grant
                served[user] = token
            }
        }
        try await daemon.stop()
        let restarted = try DaemonProcess(
            configuration: try String(contentsOfFile: setup.directory.file("tokend.toml"), encoding: .utf8), directory: setup.directory)
        try await restarted.start()
        let after = try RawClient(path: restarted.socketPath)
        for user in Self.users {
            let token = try after.call(Tokens.tokenCall(user: user)).accessToken
            #expect(token == served[user], "\(mode): \(user)'s stored token is the one served before the restart")
            #expect(token.map { !Self.garbage.contains($0) } == true)
        }
        try await restarted.stop()
        proxy.stop()
        await setup.idp.stop()
    }

    /// "A token for another user": the server answers a grant with a well-formed token whose
    /// subject is someone else's. When the credential's access token names a subject (a JWT),
    /// the new one must name the same; otherwise the answer is refused and the old token stays.
    /// (Opaque tokens carry no subject to compare: see `docs/threat_model.md`.)
    @Test func aTokenForAnotherSubjectNeverReplacesTheCredential() async throws {
        let (setup, proxy) = try await IdPDaemon.startBehindProxy(
            idpOptions: .init(refreshGrace: 60),
            daemonExtra:
                "call_timeout = \"\(Self.callTimeout)s\"\nretry_initial = \"200ms\"\nretry_max = \"500ms\"\nforced_refresh_interval = \"1s\""
        )
        let daemon = setup.daemon
        let client = try RawClient(path: daemon.socketPath)
        let minted = try await setup.idp.mint(count: 1, lifetime: 120)[0]
        let now = Int(Date().timeIntervalSince1970)
        func jwt(_ sub: String) -> String {
            func b64(_ text: String) -> String {
                Data(text.utf8).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
                    .replacingOccurrences(of: "=", with: "")
            }
            return b64(#"{"alg":"none"}"#) + "." + b64(#"{"sub":"\#(sub)","iat":\#(now),"exp":\#(now + 120)}"#) + ".c2ln"
        }
        let original = jwt("alice")
        #expect(
            try client.call(Tokens.addCall(user: "alice", access: original, refresh: minted["refresh_token"] as? String, expiresIn: 120))
                .errorName == nil)

        try await proxy.set(["mode": "jwt_access:mallory"])
        let refused = try client.call(Tokens.tokenCall(user: "alice", minValid: 600))
        #expect(refused.errorName == "io.tokend.TokenProvider.RefreshFailed", "\(refused)")
        #expect((refused.parameters["reason"] as? String)?.contains("another subject") == true, "\(refused)")
        #expect(try client.call(Tokens.tokenCall(user: "alice")).accessToken == original, "the old token is still served")
        #expect(try await proxy.stats()["faults_applied"] as? Int ?? 0 >= 1)

        // The same subject is accepted: the check refuses the other user, not every JWT.
        try await proxy.set(["mode": "jwt_access:alice"])
        var accepted: String?
        let deadline = ContinuousClock.now + .seconds(15)
        while accepted == nil, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(700))
            let reply = try client.call(Tokens.tokenCall(user: "alice", minValid: 600))
            if let token = reply.accessToken, token != original { accepted = token }
        }
        let token = try #require(accepted, "a token for the same subject was accepted")
        let payload = String(token.split(separator: ".")[1])
        let padded =
            payload.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
            + String(repeating: "=", count: (4 - payload.count % 4) % 4)
        #expect(String(decoding: Data(base64Encoded: padded) ?? Data(), as: UTF8.self).contains(#""sub": "alice""#))
        try await setup.stop()
        proxy.stop()
    }

    /// A server that quotes the refused refresh token in its `error_description`: the reason
    /// reaches the caller, the status and the log with the token redacted.
    @Test func aServerEchoingTheRefreshTokenDoesNotLeakIt() async throws {
        let (setup, proxy) = try await IdPDaemon.startBehindProxy(daemonExtra: "call_timeout = \"\(Self.callTimeout)s\"")
        let daemon = setup.daemon
        let client = try RawClient(path: daemon.socketPath)
        let minted = try await setup.addMinted("alice", lifetime: 120, client: client)
        let refresh = minted["refresh_token"] as! String
        try await proxy.set(["mode": "echo_refresh_token"])
        let reply = try client.call(Tokens.tokenCall(user: "alice", minValid: 600))
        #expect(reply.errorName == "io.tokend.TokenProvider.ReauthenticationRequired", "\(reply)")
        let reason = reply.parameters["reason"] as? String ?? ""
        #expect(reason.hasPrefix("invalid_grant") && reason.contains("<redacted>"), "\(reason)")
        let status = try client.call(#"{"method":"io.tokend.TokenProvider.Status","parameters":{"userIdentifier":"alice"}}"#)
        try await daemon.stop()
        for (place, text) in [("reply", String(describing: reply)), ("status", String(describing: status)), ("log", daemon.log)] {
            #expect(!text.contains(refresh), "the refresh token appeared in the \(place)")
        }
        proxy.stop()
        await setup.idp.stop()
    }

    /// A grant sent but never answered in time (the server acts on it later) has an unknown
    /// outcome: the provider may have rotated the refresh token. Its marker stays — through a
    /// later transient failure too — so a restart recovers it at once, inside the provider's
    /// reuse grace, instead of waiting for the planned retry. A grant the server answered (503)
    /// clears it.
    @Test func aGrantSentButNotAnsweredStaysMarkedUntilOneIsAnswered() async throws {
        let (setup, proxy) = try await IdPDaemon.startBehindProxy(
            idpOptions: .init(refreshGrace: 60),
            daemonExtra:
                "http_timeout = \"1s\"\ncall_timeout = \"\(Self.callTimeout)s\"\nretry_initial = \"60s\"\nretry_max = \"60s\"\nforced_refresh_interval = \"1s\""
        )
        let client = try RawClient(path: setup.daemon.socketPath)
        let minted = try await setup.addMinted("alice", lifetime: 300, client: client)
        let database = setup.daemon.stateDirectory + "/tokend.sqlite"
        func row() async throws -> String {
            try await CrashRecoveryTests.sqlite(
                database, "SELECT state, grant_started_at IS NOT NULL FROM credentials WHERE user_identifier = 'alice'")
        }

        // Answered, if with an error: the outcome is known, nothing stays marked.
        try await proxy.set(["mode": "status:503", "times": 1])
        #expect(try client.call(Tokens.tokenCall(user: "alice", minValid: 600)).errorName == "io.tokend.TokenProvider.RefreshFailed")
        #expect(try await row() == "retrying|0")

        // Sent, answered only after tokend gave up: the IdP rotates the refresh token meanwhile.
        try await Task.sleep(for: .milliseconds(1100))
        try await proxy.set(["mode": "slow:2", "times": 1])
        #expect(try client.call(Tokens.tokenCall(user: "alice", minValid: 600)).errorName == "io.tokend.TokenProvider.RefreshFailed")
        #expect(try await row() == "retrying|1")
        #expect(setup.daemon.log.contains("grant_outcome=unknown"))

        // A later grant answered 503 says nothing about the rotated token: still marked.
        try await Task.sleep(for: .milliseconds(1100))
        try await proxy.set(["mode": "status:503", "times": 1])
        #expect(try client.call(Tokens.tokenCall(user: "alice", minValid: 600)).errorName == "io.tokend.TokenProvider.RefreshFailed")
        #expect(try await row() == "retrying|1")

        // A restart recovers at once (the planned retry is a minute away), with the refresh
        // token the store holds, inside the IdP's grace: a new token, nothing marked.
        try await Task.sleep(for: .seconds(2))  // the slow request has reached the IdP
        try await setup.daemon.stop()
        let restarted = try DaemonProcess(
            configuration: try String(contentsOfFile: setup.directory.file("tokend.toml"), encoding: .utf8), directory: setup.directory)
        try await restarted.start()
        let after = try RawClient(path: restarted.socketPath)
        var recovered: String?
        let deadline = ContinuousClock.now + .seconds(10)
        while ContinuousClock.now < deadline {
            if try await row() == "valid|0" {
                recovered = try after.call(Tokens.tokenCall(user: "alice")).accessToken
                break
            }
            try await Task.sleep(for: .milliseconds(200))
        }
        let finalRow = try await row()
        #expect(recovered != nil && recovered != minted["access_token"] as? String, "recovered at start-up: \(finalRow)")
        #expect(restarted.log.contains("recovering an interrupted grant"))
        try await restarted.stop()
        proxy.stop()
        await setup.idp.stop()
    }
}

import Foundation
import Testing

/// The refresh engine against a real OAuth 2.0 authorization server (django-oauth-toolkit).
@Suite(.serialized)
struct OAuthRefreshTests {
    static func status(_ client: RawClient, _ user: String) throws -> [String: Any] {
        let reply = try client.call(#"{"method":"io.tokend.TokenProvider.Status","parameters":{"userIdentifier":"\#(user)"}}"#)
        return (reply.parameters["credentials"] as? [[String: Any]])?.first ?? [:]
    }

    @Test func proactiveRefreshBeforeExpiry() async throws {
        let setup = try await IdPDaemon.start(idpOptions: .init(accessTokenLifetime: 5), providerExtra: "refresh_margin = \"1s\"")
        let client = try RawClient(path: setup.daemon.socketPath)
        let minted = try await setup.addMinted("alice", lifetime: 5, client: client)
        let before = try await setup.idp.postCount()
        try await Task.sleep(for: .seconds(6))
        let reply = try client.call(Tokens.tokenCall(user: "alice"))
        #expect(reply.accessToken != nil && reply.accessToken != minted["access_token"] as? String, "\(reply)")
        #expect(try await setup.idp.postCount() > before, "the server saw the refresh grant")
        var status = try Self.status(client, "alice")
        #expect((status["refreshCount"] as? Int ?? 0) >= 1, "\(status) \(setup.daemon.log.suffix(3000))")
        // A 5-second token is refreshed every 3–4 s, so the next grant may be in flight right
        // now (`refreshing`, seen once on a loaded CI machine); the credential must settle as valid.
        let deadline = ContinuousClock.now + .seconds(10)
        while status["state"] as? String == "refreshing", ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(50))
            status = try Self.status(client, "alice")
        }
        #expect(status["state"] as? String == "valid", "\(status)")
        try await setup.stop()
    }

    @Test func theRotatedRefreshTokenSurvivesARestart() async throws {
        let setup = try await IdPDaemon.start()
        var client = try RawClient(path: setup.daemon.socketPath)
        let minted = try await setup.addMinted("alice", client: client)
        let first = try client.call(Tokens.tokenCall(user: "alice", rejected: minted["access_token"] as? String))
        #expect(first.accessToken != nil && first.accessToken != minted["access_token"] as? String, "\(first)")
        // Restart: the rotated refresh token must come back from the encrypted store.
        try await setup.daemon.stop()
        let restarted = try DaemonProcess(
            configuration: try String(contentsOfFile: setup.directory.file("tokend.toml"), encoding: .utf8), directory: setup.directory)
        try await restarted.start()
        client = try RawClient(path: restarted.socketPath)
        try await Task.sleep(for: .milliseconds(1100))
        let second = try client.call(Tokens.tokenCall(user: "alice", rejected: first.accessToken))
        #expect(
            second.accessToken != nil && second.accessToken != first.accessToken, "the server accepted the rotated refresh token: \(second)"
        )
        try await restarted.stop()
        await setup.idp.stop()
    }

    @Test func aRefreshTokenRevokedAtTheServerMeansReauthentication() async throws {
        let setup = try await IdPDaemon.start()
        let client = try RawClient(path: setup.daemon.socketPath)
        let minted = try await setup.addMinted("alice", client: client)
        try await setup.idp.revoke(refreshToken: minted["refresh_token"] as! String)
        let reply = try client.call(Tokens.tokenCall(user: "alice", minValid: 7200))
        #expect(reply.errorName == "io.tokend.TokenProvider.ReauthenticationRequired", "\(reply)")
        #expect((reply.parameters["reason"] as? String)?.hasPrefix("invalid_grant") == true)
        #expect(try Self.status(client, "alice")["state"] as? String == "reauthentication_required")
        try await setup.stop()
    }

    @Test func rejectedTokenForcesExactlyOneRefresh() async throws {
        let setup = try await IdPDaemon.start()
        let client = try RawClient(path: setup.daemon.socketPath)
        let other = try RawClient(path: setup.daemon.socketPath)
        let minted = try await setup.addMinted("alice", client: client)
        let old = minted["access_token"] as! String
        let before = try await setup.idp.postCount()
        // Two callers report the same refused token at once.
        try client.send(Tokens.tokenCall(user: "alice", rejected: old))
        try other.send(Tokens.tokenCall(user: "alice", rejected: old))
        let a = try RawClient.object(try #require(try client.receive()))
        let b = try RawClient.object(try #require(try other.receive()))
        #expect(a.accessToken != nil && a.accessToken != old)
        #expect(a.accessToken == b.accessToken)
        // A stale rejected token just gets the current one.
        try await Task.sleep(for: .milliseconds(1200))
        #expect(try client.call(Tokens.tokenCall(user: "alice", rejected: old)).accessToken == a.accessToken)
        #expect(try await setup.idp.postCount() == before + 1)
        try await setup.stop()
    }

    @Test func singleFlightAThousandCallersOneGrant() async throws {
        let setup = try await IdPDaemon.start(daemonExtra: "max_connections = 256\nmax_pipelined_calls = 1000")
        let seed = try RawClient(path: setup.daemon.socketPath)
        try await setup.addMinted("alice", lifetime: 60, client: seed)
        let before = try await setup.idp.postCount()
        // 1,000 callers on 50 connections, all needing 10 minutes of validity from a 1-minute token.
        let connections = try (0..<50).map { _ in try RawClient(path: setup.daemon.socketPath) }
        let call = Array((Tokens.tokenCall(user: "alice", minValid: 600) + "\0").utf8)
        for connection in connections { try connection.send(Array(repeating: call, count: 20).flatMap { $0 }) }
        var tokens = Set<String>()
        var errors = 0
        for connection in connections {
            for _ in 0..<20 {
                let reply = try RawClient.object(try #require(try connection.receive()))
                if let token = reply.accessToken { tokens.insert(token) } else { errors += 1 }
            }
        }
        #expect(errors == 0)
        #expect(tokens.count == 1, "every caller got the one refreshed token")
        #expect(try await setup.idp.postCount() == before + 1, "exactly one POST for 1,000 callers")
        try await setup.stop()
    }

    @Test func theInFlightCapHolds() async throws {
        let (setup, proxy) = try await IdPDaemon.startBehindProxy(daemonExtra: "max_grants_in_flight = 4\ncall_timeout = \"20s\"")
        let daemon = setup.daemon
        try await proxy.set(["mode": "slow:0.5"])
        let seed = try RawClient(path: daemon.socketPath)
        for i in 0..<16 { try await setup.addMinted("user\(i)", lifetime: 60, client: seed) }
        let clients = try (0..<16).map { _ in try RawClient(path: daemon.socketPath) }
        for (i, client) in clients.enumerated() { try client.send(Tokens.tokenCall(user: "user\(i)", minValid: 600)) }
        for client in clients { #expect(try RawClient.object(try #require(try client.receive())).accessToken != nil) }
        let stats = try await proxy.stats()
        #expect(stats["token_posts"] as? Int == 16)
        #expect((stats["max_inflight"] as? Int ?? 99) <= 4, "\(stats)")
        #expect((stats["max_inflight"] as? Int ?? 0) >= 2, "grants did run in parallel: \(stats)")
        try await setup.stop()
        proxy.stop()
    }

    /// Once tokend's own grant has used the refresh token (without rotation, so it is still the
    /// one added), removing the credential revokes it. (An added credential tokend never
    /// refreshed keeps its tokens: `AuthorizationHolesTests`.)
    @Test func removalRevokesTheRefreshToken() async throws {
        let setup = try await IdPDaemon.start(idpOptions: .init(rotate: false))
        let client = try RawClient(path: setup.daemon.socketPath)
        let minted = try await setup.addMinted("alice", client: client)
        #expect(try client.call(Tokens.tokenCall(user: "alice", minValid: 7200)).accessToken != nil)
        #expect(
            try client.call(#"{"method":"io.tokend.TokenProvider.RemoveCredential","parameters":{"userIdentifier":"alice"}}"#).errorName
                == nil)
        #expect(try await setup.idp.postCount(path: "/o/revoke_token/") == 1)
        // The token is dead at the server: a grant with it fails.
        let script = """
            import base64, sys, urllib.request, urllib.parse, urllib.error
            body = urllib.parse.urlencode({"grant_type": "refresh_token", "refresh_token": sys.stdin.read()}).encode()
            auth = base64.b64encode(b"\(IdentityProvider.clientID):\(IdentityProvider.clientSecret)").decode()
            req = urllib.request.Request(sys.argv[1], data=body, headers={"Authorization": "Basic " + auth})
            try:
                urllib.request.urlopen(req, timeout=10); print("200")
            except urllib.error.HTTPError as e:
                print(e.code, e.read().decode())
            """
        let result = try await runCommand(
            IdentityProvider.python, ["-c", script, setup.idp.tokenEndpoint], stdin: minted["refresh_token"] as? String)
        #expect(result.stdout.contains("invalid_grant"), "\(result.stdout) \(result.stderr)")
        try await setup.stop()
    }

    @Test func backoffWhileTheServerIsDownAndRecoveryWhenItReturns() async throws {
        let (setup, proxy) = try await IdPDaemon.startBehindProxy(
            providerExtra: "refresh_margin = \"1s\"",
            daemonExtra: "retry_initial = \"500ms\"\nretry_max = \"2s\"\nforced_refresh_interval = \"1s\""
        )
        let daemon = setup.daemon
        let client = try RawClient(path: daemon.socketPath)
        try await proxy.set(["mode": "status:503", "retry_after": 1])
        let minted = try await setup.addMinted("alice", lifetime: 30, client: client)
        let failed = try client.call(Tokens.tokenCall(user: "alice", minValid: 600))
        #expect(failed.errorName == "io.tokend.TokenProvider.RefreshFailed", "\(failed)")
        #expect((failed.parameters["reason"] as? String)?.contains("503") == true)
        #expect(failed.parameters["retryAt"] is Int)
        // Still valid for what a plain caller needs.
        #expect(try client.call(Tokens.tokenCall(user: "alice")).accessToken == minted["access_token"] as? String)
        try await Task.sleep(for: .seconds(3))
        let retrying = try Self.status(client, "alice")
        #expect(retrying["state"] as? String == "retrying")
        let postsWhileDown = try await proxy.stats()["token_posts"] as? Int ?? 0
        #expect(postsWhileDown >= 2 && postsWhileDown <= 6, "backed off, not hammered: \(postsWhileDown)")
        try await proxy.set(["mode": "pass"])
        var recovered = false
        let deadline = ContinuousClock.now + .seconds(15)
        while !recovered, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(500))
            recovered = try Self.status(client, "alice")["state"] as? String == "valid"
        }
        #expect(recovered)
        #expect(try client.call(Tokens.tokenCall(user: "alice")).accessToken != minted["access_token"] as? String)
        try await setup.stop()
        proxy.stop()
    }

    @Test(arguments: ["malformed_json", "no_access_token", "html", "hang", "reset"])
    func brokenResponsesNeverReplaceAGoodToken(mode: String) async throws {
        let (setup, proxy) = try await IdPDaemon.startBehindProxy(
            idpOptions: .init(refreshGrace: 10), daemonExtra: "http_timeout = \"1s\"\ncall_timeout = \"4s\"\nretry_initial = \"30s\""
        )
        let daemon = setup.daemon
        let client = try RawClient(path: daemon.socketPath)
        let minted = try await setup.addMinted("alice", lifetime: 120, client: client)
        try await proxy.set(["mode": mode])
        let started = ContinuousClock.now
        let reply = try client.call(Tokens.tokenCall(user: "alice", minValid: 600))
        #expect(reply.errorName == "io.tokend.TokenProvider.RefreshFailed", "\(mode): \(reply)")
        #expect(ContinuousClock.now - started < .seconds(5), "answered within the call timeout")
        #expect(try client.call(Tokens.tokenCall(user: "alice")).accessToken == minted["access_token"] as? String)
        #expect(try Self.status(client, "alice")["state"] as? String == "retrying")
        // Sent, and no usable answer (a 200 the tokens of which cannot be read, silence, a cut):
        // the provider may have rotated the refresh token, so the grant stays marked. A 500 page
        // is a definite failure.
        let marked = try await CrashRecoveryTests.sqlite(
            daemon.stateDirectory + "/tokend.sqlite", "SELECT grant_started_at IS NOT NULL FROM credentials WHERE user_identifier = 'alice'"
        )
        #expect(marked == (mode == "html" ? "0" : "1"), "\(mode): marker \(marked)")
        try await setup.stop()
        proxy.stop()
    }
}

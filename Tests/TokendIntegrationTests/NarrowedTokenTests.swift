import Foundation
import Testing
import TokendClient
import TokendTestSupport

/// Tokens narrowed to a scope or resource (`ProvideTokenReplacement` with `scope`/`resource`)
/// against django-oauth-toolkit, counting the grants it receives.
///
/// django-oauth-toolkit narrows the refresh token itself on a narrowed grant (its new refresh
/// token takes the narrowed scope, against RFC 6749 §6); the last test shows tokend noticing
/// that and refusing narrowed tokens of that provider from then on.
@Suite(.serialized)
struct NarrowedTokenTests {
    static let narrowed = "narrowed_tokens = true"
    /// `forced_refresh_interval` of the tests that check that a call within it asks nothing: long
    /// enough that the calls of a loaded machine fall within it.
    static let interval = 5
    /// Waits until a grant made now is past the interval.
    static func waitOutTheInterval() async throws { try await Task.sleep(for: .seconds(interval) + .milliseconds(100)) }

    /// `user` enrolled with a pair minted for `scope`; the credential says `declaredScope`.
    @discardableResult
    static func enrol(_ setup: IdPDaemon, _ user: String, client: RawClient, scope: String = "read write", declaredScope: String? = nil)
        async throws -> [String: Any]
    {
        let minted = try await setup.idp.mint(count: 1, scope: scope)[0]
        let reply = try client.call(
            Tokens.addCall(
                user: user, access: minted["access_token"] as! String, refresh: minted["refresh_token"] as? String,
                scope: declaredScope ?? scope))
        try #require(reply.errorName == nil, "\(reply)")
        return minted
    }

    static func credentials(_ reply: [String: Any]) -> [String: Any] { reply.parameters["credentials"] as? [String: Any] ?? [:] }

    /// Three callers ask at once: one grant; the token has the narrowed scope at the server, is
    /// served again without a grant (in either order of its scope values), and the
    /// credential's own token is still the one it was.
    @Test func oneGrantAnswersEveryCallerAndTheTokenIsKept() async throws {
        let setup = try await IdPDaemon.start(providerExtra: Self.narrowed)
        let clients = try (0..<3).map { _ in try RawClient(path: setup.daemon.socketPath) }
        let minted = try await Self.enrol(setup, "alice", client: clients[0])
        let before = try await setup.idp.postCount()
        for client in clients { try client.send(Tokens.tokenCall(user: "alice", scope: "read")) }
        let replies = try clients.map { try RawClient.object(try #require(try $0.receive())) }
        let token = try #require(replies[0].accessToken, "\(replies[0]) \(setup.daemon.log.suffix(2000))")
        #expect(replies.allSatisfy { $0.accessToken == token }, "\(replies)")
        #expect(token != minted["access_token"] as? String)
        #expect(Self.credentials(replies[0])["scope"] as? String == "read", "\(replies[0])")
        #expect(try await setup.idp.postCount() == before + 1, "one grant for three callers")
        let info = try await setup.idp.tokenInfo(accessToken: token)
        #expect(info["scope"] as? String == "read" && info["active"] as? Bool == true, "\(info)")

        let again = try clients[1].call(Tokens.tokenCall(user: "alice", scope: "read read"))
        #expect(again.accessToken == token, "\(again)")
        #expect(try await setup.idp.postCount() == before + 1, "the kept token answered")
        let main = try clients[2].call(Tokens.tokenCall(user: "alice"))
        #expect(main.accessToken == minted["access_token"] as? String, "the credential's own token is unchanged: \(main)")
        #expect(Self.credentials(main)["scope"] as? String == "read write")
        #expect(setup.daemon.log.contains("narrowed token obtained"))
        #expect(!setup.daemon.log.contains(token), "the narrowed token is not logged")

        // The Swift client: the narrowed token, which its in-process cache of the credential's
        // own token never answers with, and typed errors.
        let library = TokendClient(socketPath: setup.daemon.socketPath)
        #expect(try await library.credentials(for: "alice").accessToken == minted["access_token"] as? String)
        let viaLibrary = try await library.credentials(for: "alice", scope: "read")
        #expect(viaLibrary.accessToken == token && viaLibrary.scope == "read")
        #expect(try await library.credentials(for: "alice").accessToken == minted["access_token"] as? String)
        await #expect(throws: TokendClientError(code: .invalidCredential)) {
            _ = try await library.credentials(for: "alice", scope: "admin")
        }
        await #expect(throws: TokendClientError(code: .invalidParameter)) {
            _ = try await library.credentials(for: "alice", resource: "not a uri")
        }
        await library.close()
        try await setup.stop()
    }

    /// A caller that asks for more validity than the provider's tokens have gets the newest
    /// narrowed token, and no more than one grant per `forced_refresh_interval` however often it
    /// asks. `tokenctl token --scope` prints the same token.
    @Test func askingForMoreValidityThanTheProviderGivesIsNotALoop() async throws {
        let setup = try await IdPDaemon.start(providerExtra: Self.narrowed, forcedRefreshInterval: Self.interval)
        let client = try RawClient(path: setup.daemon.socketPath)
        try await Self.enrol(setup, "alice", client: client)
        let first = try #require(try client.call(Tokens.tokenCall(user: "alice", scope: "read")).accessToken)
        try await Self.waitOutTheInterval()
        let before = try await setup.idp.postCount()
        var answers: [String] = []
        for _ in 0..<5 {
            let reply = try client.call(Tokens.tokenCall(user: "alice", minValid: 7200, scope: "read"))
            answers.append(try #require(reply.accessToken, "\(reply)"))
        }
        #expect(try await setup.idp.postCount() == before + 1, "one grant for five callers asking 2 h of a 1 h token")
        #expect(Set(answers).count == 1 && answers[0] != first, "\(answers)")

        let printed = try await runCommand(
            Repository.binary("tokenctl"), ["token", "alice", "--scope", "read", "--socket", setup.daemon.socketPath])
        #expect(printed.status == 0 && printed.stdout == answers[0] + "\n", "\(printed)")
        let misuse = try await runCommand(
            Repository.binary("tokenctl"),
            ["token", "alice", "--scope", "read", "--dpop", "GET", "https://api.test/", "--socket", setup.daemon.socketPath])
        #expect(misuse.status == 2 && misuse.stderr.contains("--dpop cannot be used with --scope"), "\(misuse)")
        try await setup.stop()
    }

    /// The grant spent the credential's refresh token (django-oauth-toolkit rotates it): tokend
    /// kept the new one, so the credential's own refresh works afterwards. A resource narrows
    /// too (RFC 8707), and a token an API refused is replaced once, not in a loop.
    @Test func theRotatedRefreshTokenIsTheCredentialsAndResourcesNarrow() async throws {
        let setup = try await IdPDaemon.start(providerExtra: Self.narrowed, forcedRefreshInterval: Self.interval)
        let client = try RawClient(path: setup.daemon.socketPath)
        let minted = try await Self.enrol(setup, "alice", client: client)
        let api = "https://api.tokend.test/orders"
        let forAPI = try client.call(Tokens.tokenCall(user: "alice", resource: api))
        let token = try #require(forAPI.accessToken, "\(forAPI) \(setup.daemon.log.suffix(2000))")
        let info = try await setup.idp.tokenInfo(accessToken: token)
        #expect(info["resource"] as? [String] == [api], "\(info)")

        let before = try await setup.idp.postCount()
        try await Self.waitOutTheInterval()
        let replaced = try client.call(Tokens.tokenCall(user: "alice", rejected: token, resource: api))
        let second = try #require(replaced.accessToken, "\(replaced)")
        #expect(second != token)
        #expect(try await setup.idp.postCount() == before + 1)
        // Reported again at once, within forced_refresh_interval: no second grant.
        let refused = try client.call(Tokens.tokenCall(user: "alice", rejected: second, resource: api))
        #expect(refused.errorName == "io.tokend.TokenProvider.RefreshFailed", "\(refused)")
        #expect(try await setup.idp.postCount() == before + 1, "a rejected narrowed token is not replaced in a loop")

        // The credential's own refresh uses the refresh token the narrowed grants left.
        try await Self.waitOutTheInterval()
        let own = try client.call(Tokens.tokenCall(user: "alice", rejected: minted["access_token"] as? String))
        #expect(own.accessToken != nil && own.accessToken != minted["access_token"] as? String, "\(own) \(setup.daemon.log.suffix(2000))")
        try await setup.stop()
    }

    /// What cannot be narrowed is refused with a typed error, before any grant when tokend can
    /// tell; a provider's refusal leaves the credential's own token and refresh token working.
    @Test func refusalsAreTypedAndLeaveTheCredentialAlone() async throws {
        let setup = try await IdPDaemon.start(providerExtra: Self.narrowed)
        let client = try RawClient(path: setup.daemon.socketPath)
        // The server granted "read"; the credential claims "read write": the server refuses "write".
        let minted = try await Self.enrol(setup, "alice", client: client, scope: "read", declaredScope: "read write")
        let before = try await setup.idp.postCount()
        let cases: [(String, String, String)] = [
            (
                Tokens.tokenCall(user: "alice", scope: "admin"), "io.tokend.TokenProvider.InvalidCredential",
                "not among the credential's scope"
            ),
            (Tokens.tokenCall(user: "alice", scope: ""), "org.varlink.service.InvalidParameter", "scope"),
            (Tokens.tokenCall(user: "alice", scope: "read\u{7F}"), "org.varlink.service.InvalidParameter", "scope"),
            (Tokens.tokenCall(user: "alice", resource: "not a uri"), "org.varlink.service.InvalidParameter", "resource"),
            (Tokens.tokenCall(user: "alice", resource: "https://api.test/#part"), "org.varlink.service.InvalidParameter", "resource"),
            (
                Tokens.tokenCall(user: "alice", scope: String(repeating: "s ", count: 40)), "io.tokend.TokenProvider.InvalidCredential",
                "not among"
            ),
            (Tokens.tokenCall(user: "nobody-here", scope: "read"), "io.tokend.TokenProvider.UnknownUser", "nobody-here"),
        ]
        for (call, error, mention) in cases {
            let reply = try client.call(call)
            #expect(reply.errorName == error, "\(call): \(reply)")
            let said = (reply.parameters["reason"] ?? reply.parameters["parameter"] ?? reply.parameters["userIdentifier"]) as? String
            #expect(said?.contains(mention) == true, "\(call): \(reply)")
        }
        #expect(try await setup.idp.postCount() == before, "nothing was asked of the provider")

        let write = try client.call(Tokens.tokenCall(user: "alice", scope: "write"))
        #expect(write.errorName == "io.tokend.TokenProvider.RefreshFailed", "\(write)")
        let reason = write.parameters["reason"] as? String ?? ""
        #expect(reason.contains("refused a token narrowed to scope 'write'") && reason.contains("invalid_scope"), "\(reason)")
        #expect(try await setup.idp.postCount() == before + 1)
        let main = try client.call(Tokens.tokenCall(user: "alice"))
        #expect(main.accessToken == minted["access_token"] as? String, "\(main)")
        #expect(try OAuthRefreshTests.status(client, "alice")["state"] as? String == "valid")
        let own = try client.call(Tokens.tokenCall(user: "alice", rejected: minted["access_token"] as? String))
        #expect(own.accessToken != nil && own.accessToken != minted["access_token"] as? String, "\(own)")
        for secret in [minted["access_token"], minted["refresh_token"]].compactMap({ $0 as? String }) {
            #expect(!setup.daemon.log.contains(secret))
        }
        try await setup.stop()
    }

    /// Without `narrowed_tokens = true`, a provider is never asked for narrowed tokens.
    @Test func aProviderWithoutNarrowedTokensIsNotAsked() async throws {
        let setup = try await IdPDaemon.start()
        let client = try RawClient(path: setup.daemon.socketPath)
        try await Self.enrol(setup, "alice", client: client)
        let before = try await setup.idp.postCount()
        let reply = try client.call(Tokens.tokenCall(user: "alice", scope: "read"))
        #expect(reply.errorName == "io.tokend.TokenProvider.InvalidCredential", "\(reply)")
        #expect((reply.parameters["reason"] as? String)?.contains("narrowed_tokens = true") == true, "\(reply)")
        #expect(try await setup.idp.postCount() == before)
        try await setup.stop()
    }

    /// A reload that turns `narrowed_tokens` off stops the kept narrowed tokens being served at
    /// once, from memory too.
    @Test func aReloadThatTurnsNarrowedTokensOffStopsServingThem() async throws {
        let setup = try await IdPDaemon.start(providerExtra: Self.narrowed)
        let client = try RawClient(path: setup.daemon.socketPath)
        try await Self.enrol(setup, "alice", client: client)
        #expect(try client.call(Tokens.tokenCall(user: "alice", scope: "read")).accessToken != nil)
        let configuration = try String(contentsOfFile: setup.directory.file("tokend.toml"), encoding: .utf8)
        try setup.directory.write("tokend.toml", configuration.replacingOccurrences(of: Self.narrowed, with: "narrowed_tokens = false"))
        setup.daemon.send(signal: SIGHUP)
        let deadline = ContinuousClock.now + .seconds(10)
        while !setup.daemon.log.contains("configuration reloaded"), ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(50))
        }
        let refused = try client.call(Tokens.tokenCall(user: "alice", scope: "read"))
        #expect(refused.errorName == "io.tokend.TokenProvider.InvalidCredential", "\(refused) \(setup.daemon.log.suffix(1500))")
        try await setup.stop()
    }

    /// The narrowed token is kept sealed in the store: after a restart and a key rotation it is
    /// served without a grant, and the database file holds no token in plaintext. Removing the
    /// credential removes it: the same user identifier enrolled again gets a new one.
    @Test func theNarrowedTokenIsDurableSealedAndGoesWithItsCredential() async throws {
        let setup = try await IdPDaemon.start(providerExtra: Self.narrowed)
        var client = try RawClient(path: setup.daemon.socketPath)
        try await Self.enrol(setup, "alice", client: client)
        let token = try #require(try client.call(Tokens.tokenCall(user: "alice", scope: "read")).accessToken)
        let rotated = try client.call(#"{"method":"io.tokend.TokenProvider.RotateKey"}"#)
        #expect(rotated.errorName == nil, "\(rotated)")
        try await setup.daemon.stop()
        let database = try Data(contentsOf: URL(fileURLWithPath: setup.daemon.stateDirectory + "/tokend.sqlite"))
        #expect(database.range(of: Data(token.utf8)) == nil, "the narrowed token is not in the store in plaintext")

        let restarted = try DaemonProcess(
            configuration: try String(contentsOfFile: setup.directory.file("tokend.toml"), encoding: .utf8), directory: setup.directory)
        try await restarted.start()
        client = try RawClient(path: restarted.socketPath)
        let before = try await setup.idp.postCount()
        let again = try client.call(Tokens.tokenCall(user: "alice", scope: "read"))
        #expect(again.accessToken == token, "\(again) \(restarted.log.suffix(2000))")
        #expect(try await setup.idp.postCount() == before, "served from the store, no grant")

        #expect(
            try client.call(#"{"method":"io.tokend.TokenProvider.RemoveCredential","parameters":{"userIdentifier":"alice"}}"#).errorName
                == nil)
        try await Self.enrol(setup, "alice", client: client)
        let fresh = try client.call(Tokens.tokenCall(user: "alice", scope: "read"))
        #expect(fresh.accessToken != nil && fresh.accessToken != token, "\(fresh)")
        #expect(try await setup.idp.postCount() > before)
        try await restarted.stop()
        await setup.idp.stop()
    }

    /// A stop waits for a narrowed grant under way, even when its caller has given up: the
    /// rotated refresh token and the narrowed token are committed, so after the restart the token
    /// is served without a grant and the credential's own refresh works.
    @Test func aStopWaitsForANarrowedGrantWhoseCallerGaveUp() async throws {
        let (setup, proxy) = try await IdPDaemon.startBehindProxy(
            providerExtra: Self.narrowed, daemonExtra: "call_timeout = \"1s\"\nshutdown_timeout = \"30s\"\nhttp_timeout = \"20s\"")
        let client = try RawClient(path: setup.daemon.socketPath)
        let minted = try await Self.enrol(setup, "alice", client: client)
        try await proxy.set(["mode": "slow:4"])
        try client.send(Tokens.tokenCall(user: "alice", scope: "read"))
        let timedOut = try RawClient.object(try #require(try client.receive()))
        #expect(timedOut.errorName == "io.tokend.TokenProvider.RefreshFailed", "the caller gave up after 1 s: \(timedOut)")
        #expect(try await setup.daemon.stop() == 0)
        #expect(setup.daemon.log.contains("narrowed token obtained"), "\(setup.daemon.log.suffix(2000))")
        try await proxy.set(["mode": "pass"])
        let posts = try await proxy.stats()["token_posts"] as? Int ?? -1

        let restarted = try DaemonProcess(
            configuration: try String(contentsOfFile: setup.directory.file("tokend.toml"), encoding: .utf8), directory: setup.directory)
        try await restarted.start()
        let again = try RawClient(path: restarted.socketPath)
        let narrowed = try again.call(Tokens.tokenCall(user: "alice", scope: "read"))
        #expect(narrowed.accessToken != nil, "\(narrowed) \(restarted.log.suffix(2000))")
        #expect(try await proxy.stats()["token_posts"] as? Int == posts, "served from the store")
        let own = try again.call(Tokens.tokenCall(user: "alice", rejected: minted["access_token"] as? String))
        #expect(own.accessToken != nil && own.accessToken != minted["access_token"] as? String, "\(own) \(restarted.log.suffix(2000))")
        try await restarted.stop()
        await setup.idp.stop()
        proxy.stop()
    }

    /// django-oauth-toolkit gives the refresh token of a narrowed grant the narrowed scope, so
    /// the credential's next own refresh comes back narrower. tokend says so in the journal and
    /// asks that provider for no more narrowed tokens.
    @Test func aProviderThatNarrowsTheRefreshTokenIsNoticedAndNotAskedAgain() async throws {
        let setup = try await IdPDaemon.start(providerExtra: Self.narrowed)
        let client = try RawClient(path: setup.daemon.socketPath)
        let minted = try await Self.enrol(setup, "alice", client: client)
        #expect(try client.call(Tokens.tokenCall(user: "alice", scope: "read")).accessToken != nil)
        try await Task.sleep(for: .milliseconds(1100))
        let own = try client.call(Tokens.tokenCall(user: "alice", rejected: minted["access_token"] as? String))
        #expect(own.accessToken != nil, "\(own)")
        #expect(Self.credentials(own)["scope"] as? String == "read", "the server narrowed the refresh token: \(own)")
        #expect(
            setup.daemon.log.contains("the provider narrowed a refresh token after a narrowed grant"), "\(setup.daemon.log.suffix(2000))")
        let before = try await setup.idp.postCount()
        let refused = try client.call(Tokens.tokenCall(user: "alice", scope: "read"))
        #expect(refused.errorName == "io.tokend.TokenProvider.InvalidCredential", "\(refused)")
        #expect((refused.parameters["reason"] as? String)?.contains("narrowed a credential's refresh token itself") == true)
        #expect(try await setup.idp.postCount() == before)
        try await setup.stop()
    }
}

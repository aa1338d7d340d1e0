import Foundation
import Testing

/// HAT PDA providers against the stand-in PDA (`Tests/idp/pda.py`) and the real tokend binary:
/// verification at enrolment, key rotation, renewal through `X-Auth-Token`, and the 30-day cap
/// (with small ages, since the binary has no clock hook: the stand-in mints the times a test needs).
@Suite(.serialized)
struct HATProviderTests {
    struct Setup {
        let pda: StandInPDA
        let daemon: DaemonProcess
        let client: RawClient

        func stop() async throws {
            try await daemon.stop()
            pda.stop()
        }
    }

    /// A daemon with a `hat` provider named `pda` (plus `more` providers built from the same PDA).
    static func start(providerExtra: String = "", more: [(name: String, extra: String)] = []) async throws -> Setup {
        let pda = StandInPDA()
        try await pda.start()
        var providers = pda.providerConfiguration(extra: providerExtra)
        for (name, extra) in more { providers += "\n\n" + pda.providerConfiguration(name: name, extra: extra) }
        let config = DaemonProcess.configuration(
            extraDaemon: "forced_refresh_interval = \"1s\"\nhttp_timeout = \"2s\"\nretry_initial = \"1s\"\nretry_max = \"2s\"",
            providers: providers
        )
        let daemon = try DaemonProcess(configuration: config)
        try await daemon.start()
        return Setup(pda: pda, daemon: daemon, client: try RawClient(path: daemon.socketPath))
    }

    static var now: Int { Int(Date().timeIntervalSince1970) }

    /// `AddCredential` with only the token, as a finished HAT login hands it over.
    static func addCall(user: String, token: String, provider: String = "pda") -> String {
        let call: [String: Any] = [
            "method": "io.tokend.TokenProvider.AddCredential",
            "parameters": ["userIdentifier": user, "provider": provider, "accessToken": token],
        ]
        return String(decoding: try! JSONSerialization.data(withJSONObject: call), as: UTF8.self)
    }

    static func status(_ client: RawClient, _ user: String) throws -> [String: Any] {
        let reply = try client.call(#"{"method":"io.tokend.TokenProvider.Status","parameters":{"userIdentifier":"\#(user)"}}"#)
        return (reply.parameters["credentials"] as? [[String: Any]])?.first ?? [:]
    }

    /// The payload of a JWT, decoded (test-side; nothing verified).
    static func claims(_ token: String) -> [String: Any] {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3 else { return [:] }
        var text = parts[1].replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while text.count % 4 != 0 { text += "=" }
        guard let data = Data(base64Encoded: text) else { return [:] }
        return (try? JSONSerialization.jsonObject(with: data)) as? [String: Any] ?? [:]
    }

    /// Polls `condition` every 200 ms for at most `limit`.
    static func eventually(_ limit: Duration = .seconds(20), _ condition: () async throws -> Bool) async throws -> Bool {
        let deadline = ContinuousClock.now + limit
        while ContinuousClock.now < deadline {
            if try await condition() { return true }
            try await Task.sleep(for: .milliseconds(200))
        }
        return try await condition()
    }

    /// No token, nor any token's signature, in the daemon's log.
    static func expectNoTokens(_ tokens: [String], in log: String) {
        for token in tokens {
            #expect(!log.contains(token), "a token is in the daemon's log")
            if let signature = token.split(separator: ".").last, signature.count > 16 {
                #expect(!log.contains(signature), "a token's signature is in the daemon's log")
            }
        }
    }

    // MARK: Verification at enrolment

    @Test func everyVerificationFailureIsRefusedWithItsOwnReason() async throws {
        let setup = try await Self.start()
        let pda = setup.pda
        let now = Self.now
        let cases: [(String, String, String)] = [
            ("alg-none", try await pda.mint(alg: "none"), "unsigned (alg none"),
            ("hs256", try await pda.mint(alg: "HS256-public-key"), "symmetric algorithm HS256"),
            ("rs512", try await pda.mint(alg: "RS512"), "algorithm RS512"),
            ("wrong-key", try await pda.mint(alg: "RS256-wrong-key"), "signature does not verify"),
            ("wrong-iss", try await pda.mint(iss: "mallory.hubat.net"), "issued by \"mallory.hubat.net\""),
            ("wrong-app", try await pda.mint(application: "someone-else"), "application \"someone-else\""),
            ("expired", try await pda.mint(iat: now - 7200, exp: now - 60), "expired at"),
            ("not-a-jwt", "opaque-token-\(UUID().uuidString)", "not a JWT"),
        ]
        var reasons: Set<String> = []
        for (user, token, expected) in cases {
            let reply = try setup.client.call(Self.addCall(user: user, token: token))
            #expect(reply.errorName == "io.tokend.TokenProvider.InvalidCredential", "\(user): \(reply)")
            let reason = reply.parameters["reason"] as? String ?? ""
            #expect(reason.contains(expected), "\(user): \(reason)")
            #expect(!reason.contains(token), "\(user): the reason quotes the token")
            reasons.insert(reason)
            #expect(try Self.status(setup.client, user).isEmpty, "\(user): nothing was stored")
        }
        #expect(reasons.count == cases.count, "every failure has its own message")

        // A refresh token is refused too: a PDA issues none.
        let good = try await pda.mint()
        let withRefresh = try setup.client.call(
            Tokens.addCall(user: "r", access: good, refresh: "rt-\(UUID().uuidString)", provider: "pda"))
        #expect(withRefresh.errorName == "io.tokend.TokenProvider.InvalidCredential")

        // The genuine token is accepted and served, with the token's own times.
        let iat = now - 60
        let exp = now + 3600
        let genuine = try await pda.mint(iat: iat, exp: exp)
        let added = try setup.client.call(Self.addCall(user: "alice", token: genuine))
        #expect(added.errorName == nil, "\(added)")
        let served = try setup.client.call(Tokens.tokenCall(user: "alice"))
        #expect(served.accessToken == genuine)
        let status = try Self.status(setup.client, "alice")
        #expect(status["issuedAt"] as? Int == iat)
        #expect(status["sessionStartedAt"] as? Int == iat)
        #expect(status["sessionEndsAt"] as? Int == exp, "the token's exp (before the 30-day cap) ends the login")
        #expect(try await pda.stats()["publickey"] == 1, "the key was fetched once and cached")

        Self.expectNoTokens(cases.map(\.1) + [good, genuine], in: setup.daemon.log)
        try await setup.stop()
    }

    @Test func tokenctlAddShowsTheReason() async throws {
        let setup = try await Self.start()
        let forged = try await setup.pda.mint(alg: "HS256-public-key")
        let result = try await runCommand(
            Repository.binary("tokenctl"), ["add", "--socket", setup.daemon.socketPath, "alice", "--provider", "pda"],
            stdin: #"{"access_token":"\#(forged)"}"#
        )
        #expect(result.status != 0)
        #expect(result.stderr.contains("symmetric algorithm HS256"), "\(result.stderr)")
        #expect(!result.stderr.contains(forged) && !result.stdout.contains(forged))

        let genuine = try await setup.pda.mint()
        let ok = try await runCommand(
            Repository.binary("tokenctl"), ["add", "--socket", setup.daemon.socketPath, "alice", "--provider", "pda"],
            stdin: #"{"access_token":"\#(genuine)"}"#
        )
        #expect(ok.status == 0, "\(ok.stderr)")
        Self.expectNoTokens([forged, genuine], in: setup.daemon.log)
        try await setup.stop()
    }

    @Test func aRotatedKeyIsFetchedAgain() async throws {
        let setup = try await Self.start(providerExtra: "key_refetch_interval = \"1s\"")
        let pda = setup.pda
        let first = try await pda.mint()
        #expect(try setup.client.call(Self.addCall(user: "alice", token: first)).errorName == nil)
        #expect(try await pda.stats()["publickey"] == 1)

        try await Task.sleep(for: .milliseconds(1200))
        try await pda.rotateKey()
        let second = try await pda.mint()
        let reply = try setup.client.call(Self.addCall(user: "bob", token: second))
        #expect(reply.errorName == nil, "a token signed with the new key is accepted after a re-fetch: \(reply)")
        #expect(try await pda.stats()["publickey"] == 2)

        // The old key is gone: a token it signed no longer verifies.
        let stale = try setup.client.call(Self.addCall(user: "carol", token: first))
        #expect(stale.errorName == "io.tokend.TokenProvider.InvalidCredential")
        #expect((stale.parameters["reason"] as? String)?.contains("signature does not verify") == true)
        Self.expectNoTokens([first, second], in: setup.daemon.log)
        try await setup.stop()
    }

    // MARK: Renewal

    @Test func renewalReplacesTheTokenAndKeepsItsExp() async throws {
        let setup = try await Self.start(providerExtra: "idle_limit = \"6s\"\nrenewal_interval = \"2s\"\nrefresh_margin = \"1s\"")
        let now = Self.now
        let exp = now + 3600
        let original = try await setup.pda.mint(iat: now, exp: exp)
        #expect(try setup.client.call(Self.addCall(user: "alice", token: original)).errorName == nil)

        let renewed = try await Self.eventually { (try await setup.pda.stats()["renewed"] ?? 0) >= 2 }
        #expect(renewed, "tokend renewed inside the idle limit: \(setup.daemon.log.suffix(2000))")
        let served = try setup.client.call(Tokens.tokenCall(user: "alice"))
        let token = try #require(served.accessToken)
        #expect(token != original, "the stored token changed")
        let claims = Self.claims(token)
        #expect(claims["exp"] as? Int == exp, "exp does not move")
        #expect((claims["iat"] as? Int ?? 0) > now, "iat moves")

        let status = try Self.status(setup.client, "alice")
        #expect(status["state"] as? String == "valid")
        #expect((status["refreshCount"] as? Int ?? 0) >= 2)
        #expect(status["sessionStartedAt"] as? Int == now, "the login started with the first token")
        // Served no longer than the idle limit past the latest renewal.
        #expect((status["expiresAt"] as? Int ?? .max) - (status["issuedAt"] as? Int ?? 0) <= 6)
        Self.expectNoTokens([original, token], in: setup.daemon.log)
        try await setup.stop()
    }

    @Test func renewalFailuresAreClassified() async throws {
        // Idle limit a minute: the token stays servable while the failures play out.
        let setup = try await Self.start(providerExtra: "idle_limit = \"60s\"\nrenewal_interval = \"2s\"\nrefresh_margin = \"1s\"")
        let original = try await setup.pda.mint()
        try await setup.pda.setRenewal("500")  // before the first renewal, so the original token stays
        #expect(try setup.client.call(Self.addCall(user: "alice", token: original)).errorName == nil)

        // A server error and a renewed token that does not verify are retried; the token stays.
        for (mode, expected) in [
            ("500", "answered 500"), ("bad-signature", "signature does not verify"), ("wrong-iss", "mallory.example"),
            ("same-token", "not renewed"),
        ] {
            try await setup.pda.setRenewal(mode)
            let seen = try await Self.eventually {
                let status = try Self.status(setup.client, "alice")
                return status["state"] as? String == "retrying" && (status["lastError"] as? String)?.contains(expected) == true
            }
            let status = try Self.status(setup.client, "alice")
            #expect(seen, "\(mode): \(status)")
        }
        #expect(try setup.client.call(Tokens.tokenCall(user: "alice")).accessToken == original, "the current token is still served")

        // 401: the PDA no longer accepts the token; only a new login helps.
        try await setup.pda.setRenewal("401")
        let ended = try await Self.eventually { try Self.status(setup.client, "alice")["state"] as? String == "reauthentication_required" }
        let status = try Self.status(setup.client, "alice")
        #expect(ended, "\(status)")
        let reply = try setup.client.call(Tokens.tokenCall(user: "alice"))
        #expect(reply.errorName == "io.tokend.TokenProvider.ReauthenticationRequired")
        #expect((reply.parameters["reason"] as? String)?.contains("401") == true, "\(reply)")
        Self.expectNoTokens([original], in: setup.daemon.log)
        try await setup.stop()
    }

    // MARK: The 30-day cap

    @Test func theLoginEndsAtTheCapAndStatusSaysWhen() async throws {
        // `pda`: a cap of 50 hours; `short`: a cap of 20 seconds with a warning 16 seconds ahead.
        let setup = try await Self.start(
            providerExtra: "max_session_age = \"50h\"\nsession_warning = \"1h\"",
            more: [("short", "max_session_age = \"20s\"\nsession_warning = \"16s\"")])
        let now = Self.now
        let long = try await setup.pda.mint(iat: now, exp: now + 30 * 86400)
        #expect(try setup.client.call(Self.addCall(user: "alice", token: long)).errorName == nil)
        // The short logins are minted right before their adds, each with its own start: on a loaded
        // machine the seconds spent on the adds before them must not use up their lifetimes.
        let bobStart = Self.now
        let short = try await setup.pda.mint(iat: bobStart, exp: bobStart + 30 * 86400)
        #expect(try setup.client.call(Self.addCall(user: "bob", token: short, provider: "short")).errorName == nil)
        let carolStart = Self.now
        let expiring = try await setup.pda.mint(iat: carolStart, exp: carolStart + 25)
        #expect(try setup.client.call(Self.addCall(user: "carol", token: expiring)).errorName == nil)

        #expect(try Self.status(setup.client, "alice")["sessionEndsAt"] as? Int == now + 50 * 3600)
        #expect(try Self.status(setup.client, "bob")["sessionEndsAt"] as? Int == bobStart + 20)
        #expect(try Self.status(setup.client, "carol")["sessionEndsAt"] as? Int == carolStart + 25, "an earlier exp ends the login")
        let table = try await runCommand(Repository.binary("tokenctl"), ["status", "--socket", setup.daemon.socketPath])
        #expect(
            table.stdout.contains("alice: the login ends in 2d 1h") || table.stdout.contains("alice: the login ends in 2d 2h"),
            "\(table.stdout)")
        #expect(table.stdout.contains("reauthenticate within 2 days"), "\(table.stdout)")

        let ended = try await Self.eventually(.seconds(60)) {
            try Self.status(setup.client, "bob")["state"] as? String == "reauthentication_required"
                && Self.status(setup.client, "carol")["state"] as? String == "reauthentication_required"
        }
        let (bob, carol) = (try Self.status(setup.client, "bob"), try Self.status(setup.client, "carol"))
        #expect(ended, "\(bob) \(carol)")
        let reply = try setup.client.call(Tokens.tokenCall(user: "bob"))
        #expect(reply.errorName == "io.tokend.TokenProvider.ReauthenticationRequired", "no dead token is served: \(reply)")
        #expect(try Self.status(setup.client, "alice")["state"] as? String == "valid")
        let warnings = setup.daemon.log.split(separator: "\n").filter { $0.contains("login ends soon") }
        #expect(warnings.contains { $0.contains("bob") }, "a warning came ahead of the end")
        #expect(!warnings.contains { $0.contains("alice") }, "no warning 50 hours ahead with a lead of one hour")
        let after = try await runCommand(Repository.binary("tokenctl"), ["status", "--socket", setup.daemon.socketPath])
        #expect(!after.stdout.contains("bob: the login ends"), "\(after.stdout)")
        #expect(try await setup.pda.stats()["validate"] == 0, "nothing to renew: the idle limit lies beyond every end")
        Self.expectNoTokens([long, short, expiring], in: setup.daemon.log)
        try await setup.stop()
    }
}

import Foundation
import Testing
import TokendTestSupport

/// DPoP (RFC 9449) against glewlwyd, which binds tokens to a proof's key (`cnf.jkt`) and checks
/// proofs at its token and userinfo endpoints, with or without nonces.
@Suite(.serialized)
struct GlewlwydDPoPTests {
    /// The payload of a JWT access token.
    static func claims(_ jwt: String) throws -> [String: Any] {
        let parts = jwt.split(separator: ".")
        try #require(parts.count == 3, "not a JWT")
        var text = String(parts[1]).replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        text += String(repeating: "=", count: (4 - text.count % 4) % 4)
        let data = try #require(Data(base64Encoded: text))
        return try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
    }

    /// `tokenctl token USER --dpop GET URL [--dpop-nonce N]`: its two header lines.
    static func headers(_ setup: GlewlwydInteropTests.Setup, _ user: String, url: String, nonce: String? = nil) async throws -> [String] {
        let result = try await setup.tokenctl(["token", user, "--dpop", "GET", url] + (nonce.map { ["--dpop-nonce", $0] } ?? []))
        #expect(result.status == 0, "\(result.stderr)")
        return result.stdout.split(separator: "\n").map(String.init)
    }

    /// A device login with `dpop = true` binds the tokens to tokend's key (the login's poll
    /// carries a proof); refreshes carry proofs too (glewlwyd binds the refresh token, so
    /// without one they fail); and the proofs `tokenctl token --dpop` prints are accepted by
    /// glewlwyd's userinfo endpoint, a resource server that refuses the same token as a bearer
    /// token. With `--dpop-nonce` glewlwyd demands a nonce at both endpoints: tokend answers
    /// the token endpoint's demand itself, and a program passes the resource server's on.
    ///
    /// With a `private_key_jwt` client, each retry with a nonce carries a new client assertion
    /// (glewlwyd refuses an assertion's `jti` a second time).
    @Test(arguments: [(false, Glewlwyd.Client.secret), (true, .secret), (true, .privateKeyJWTEC)])
    func loginRefreshAndProofsAreBoundToTokendsKey(nonce: Bool, client: Glewlwyd.Client) async throws {
        let setup = try await GlewlwydInteropTests.Setup.start(
            ["--device-interval", "1", "--refresh-token-one-use", "always"] + (nonce ? ["--dpop-nonce"] : []), client: client,
            providerExtra: "dpop = true")
        try await setup.deviceLogin("bob")
        let client = try RawClient(path: setup.daemon.socketPath)
        let reply = try client.call(Tokens.tokenCall(user: "bob"))
        let credentials = try #require(reply.parameters["credentials"] as? [String: Any], "\(reply)")
        #expect((credentials["tokenType"] as? String)?.lowercased() == "dpop", "\(credentials["tokenType"] ?? "-")")
        let first = try #require(reply.accessToken)
        let jkt = try #require((try Self.claims(first)["cnf"] as? [String: Any])?["jkt"] as? String, "the token is bound to a key")

        // The proof's key is the one glewlwyd bound the token to.
        let url = setup.server.userinfoEndpoint
        var lines = try await Self.headers(setup, "bob", url: url)
        try #require(lines.count == 2, "\(lines)")
        let proof = String(lines[1].dropFirst("DPoP: ".count))
        #expect(try await DPoPProofCallTests.inspect(proof, token: first)["jkt"] as? String == jkt)
        var answer = try await setup.server.userinfo(headers: lines)
        if nonce {
            // The resource server wants its nonce in the proof: the program asks again with it.
            #expect(answer.status == 401 && answer.nonce != nil, "\(answer)")
            lines = try await Self.headers(setup, "bob", url: url + "?with=query", nonce: answer.nonce)
            answer = try await setup.server.userinfo(headers: lines, url: url + "?with=query")
        }
        #expect(answer.status == 200 && answer.body.contains("\"sub\""), "\(answer)")
        if !nonce {
            // The shell example of the README and docs/clients.md (tokenctl named by its path).
            let curl = try await runCommand(
                "/bin/bash",
                [
                    "-c", #"curl -sS --cacert "$1" -H @<("$4" token bob --socket "$2" --dpop GET "$3") "$3""#, "example",
                    setup.server.caFile, setup.daemon.socketPath, url, Repository.binary("tokenctl"),
                ])
            #expect(curl.status == 0 && curl.stdout.contains("\"sub\""), "\(curl)")
        }
        let asBearer = try await setup.server.userinfo(headers: ["Authorization: Bearer \(first)"])
        #expect(asBearer.status == 401, "the token is no bearer token: \(asBearer)")

        // Refreshes (each spends the refresh token) keep the binding.
        var seen = [first]
        for round in 1...2 {
            let refreshed = try client.call(Tokens.tokenCall(user: "bob", minValid: 7200))
            let token = try #require(refreshed.accessToken, "round \(round): \(refreshed) \(setup.daemon.log.suffix(1500))")
            #expect(!seen.contains(token))
            #expect((try Self.claims(token)["cnf"] as? [String: Any])?["jkt"] as? String == jkt)
            seen.append(token)
            try await Task.sleep(for: .milliseconds(1500))  // forced_refresh_interval
        }
        let status = try await setup.tokenctl(["status", "bob"])
        #expect(status.stdout.contains("valid"), "\(status.stdout)")
        let removed = try await setup.tokenctl(["remove", "bob"])
        #expect(removed.status == 0, "\(removed.stderr)")
        try await setup.stop()
        #expect(!setup.daemon.log.contains("PRIVATE KEY") && !setup.daemon.log.contains(proof))
        for token in seen { #expect(!setup.daemon.log.contains(token)) }
    }

    /// A bearer credential (a password grant without a proof) handed to a `dpop = true` provider
    /// cannot be refreshed there: glewlwyd refuses a refresh token issued without a key when the
    /// grant carries a proof (`invalid_dpop_proof`), so such a credential would sit in retrying
    /// until it died. AddCredential refuses it with an InvalidCredential that says to log in
    /// with `tokenctl login`, and stores nothing.
    @Test func bearerTokensAreRefusedAtEnrolmentForADPoPProvider() async throws {
        let setup = try await GlewlwydInteropTests.Setup.start(providerExtra: "dpop = true")
        let grant = try await setup.server.passwordGrant()
        let access = try #require(grant["access_token"] as? String)
        #expect((try Self.claims(access)["cnf"] as? [String: Any]) == nil, "a bearer token")
        let client = try RawClient(path: setup.daemon.socketPath)
        let added = try Self.addRefused(grant, access: access, client: client)
        // What the refusal spares: had it been stored, its first refresh would fail at glewlwyd.
        if added.errorName == nil {
            let refreshed = try client.call(Tokens.tokenCall(user: "alice", minValid: 7200))
            #expect(
                refreshed.accessToken != nil, "the refresh of the added bearer credential: \(refreshed) \(setup.daemon.log.suffix(1500))")
        }
        try await setup.stop()
        #expect(!setup.daemon.log.contains(access))
    }

    /// Tokens a program obtained with a key of its own (glewlwyd put its thumbprint in the
    /// access token's `cnf.jkt`) cannot be presented with tokend's proofs: AddCredential refuses
    /// them with an InvalidCredential that says what to do, stores nothing and sends no grant.
    @Test func tokensBoundToAnotherKeyAreRefusedAtEnrolment() async throws {
        let setup = try await GlewlwydInteropTests.Setup.start(providerExtra: "dpop = true")
        let grant = try await setup.server.passwordGrantBoundToAnotherKey()
        let access = try #require(grant["access_token"] as? String)
        #expect((try Self.claims(access)["cnf"] as? [String: Any])?["jkt"] is String, "glewlwyd bound the token")
        let client = try RawClient(path: setup.daemon.socketPath)
        let added = try Self.addRefused(grant, access: access, client: client)
        try await setup.stop()
        #expect(!setup.daemon.log.contains("refresh grant") && !setup.daemon.log.contains(access))
    }

    /// Adds glewlwyd's `grant` as alice's credential for provider `gw`, expecting the refusal
    /// that says to log in with `tokenctl login` and nothing stored; the reply.
    static func addRefused(_ grant: [String: Any], access: String, client: RawClient) throws -> [String: Any] {
        let added = try client.call(
            Tokens.addCall(
                user: "alice", access: access, refresh: grant["refresh_token"] as? String, expiresIn: grant["expires_in"] as? Int ?? 3600,
                provider: "gw"))
        #expect(added.errorName == "io.tokend.TokenProvider.InvalidCredential", "\(added)")
        #expect((added.parameters["reason"] as? String)?.contains("tokenctl login") == true, "\(added)")
        #expect(try client.call(Tokens.tokenCall(user: "alice")).errorName == "io.tokend.TokenProvider.UnknownUser")
        return added
    }
}

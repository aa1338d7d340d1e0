import Foundation
import Testing
import TokendTestSupport

/// tokend against a second real authorization server, glewlwyd (Debian's package; OpenID
/// Connect plugin, HTTPS with a test CA), not only django-oauth-toolkit: discovery, refresh
/// grants with and without rotation, revocation on removal, and a device login through
/// `tokenctl login`.
@Suite(.serialized)
struct GlewlwydInteropTests {
    struct Setup {
        let directory: ScratchDirectory
        let server: Glewlwyd
        let daemon: DaemonProcess

        /// glewlwyd with `serverArguments`, and a daemon whose provider `gw` finds it by
        /// discovery and authenticates as `client` (a key of the server's `clients`).
        static func start(
            _ serverArguments: [String] = [], client: Glewlwyd.Client = .secret, providerExtra: String = "", daemonExtra: String = ""
        ) async throws -> Setup {
            try #require(Glewlwyd.isAvailable, "glewlwyd is not installed (scripts/setup-host.sh installs it)")
            let directory = try ScratchDirectory()
            let server = Glewlwyd(directory: directory, client: client)
            try await server.start(serverArguments)
            try directory.write("gw-secret", Glewlwyd.clientSecret + "\n", mode: 0o600)
            let authentication: String
            switch client {
            case .secret:
                authentication = """
                    client_secret_file = "gw-secret"
                    client_auth = "client_secret_basic"
                    """
            case .mutualTLS:
                authentication = """
                    client_auth = "tls_client_auth"
                    tls_client_certificate_file = "\(server.clientCertificateFile)"
                    tls_client_key_file = "\(server.clientKeyFile)"
                    """
            case .privateKeyJWTEC, .privateKeyJWTRSA:
                authentication = """
                    client_auth = "private_key_jwt"
                    client_assertion_key_file = "\(server.clientKeyFile)"
                    client_assertion_kid = "\(server.clientKeyID)"
                    """
            }
            let provider = """
                [providers.gw]
                kind = "oauth2"
                issuer = "\(server.issuer)"
                ca_file = "\(server.caFile)"
                client_id = "\(server.clientID)"
                \(authentication)
                scope = "openid read offline_access"
                \(providerExtra)
                """
            let daemon = try DaemonProcess(
                configuration: DaemonProcess.configuration(
                    extraDaemon: #"forced_refresh_interval = "1s""# + "\n" + daemonExtra, providers: provider),
                directory: directory)
            try await daemon.start()
            return Setup(directory: directory, server: server, daemon: daemon)
        }

        func tokenctl(_ arguments: [String]) async throws -> CommandResult {
            try await runCommand(Repository.binary("tokenctl"), arguments + ["--socket", daemon.socketPath], timeout: .seconds(60))
        }

        /// Logs `user` in with `tokenctl login --device`, approving the code as alice would.
        func deviceLogin(_ user: String) async throws {
            let login = try StreamingCommand(
                Repository.binary("tokenctl"), ["login", user, "--provider", "gw", "--device", "--socket", daemon.socketPath])
            let userCode = try await login.line(startingWith: "User code: ")
            try await server.approveDevice(userCode: userCode)
            let result = try await login.finish()
            #expect(result.status == 0, "\(result.stdout) \(result.stderr) \(daemon.log.suffix(2000))")
        }

        /// Adds alice's credential from a password grant; returns the grant's tokens.
        func addAlice() async throws -> (access: String, refresh: String) {
            let grant = try await server.passwordGrant()
            let access = try #require(grant["access_token"] as? String)
            let refresh = try #require(grant["refresh_token"] as? String)
            let reply = try RawClient(path: daemon.socketPath).call(
                Tokens.addCall(
                    user: "alice", access: access, refresh: refresh, expiresIn: grant["expires_in"] as? Int ?? 3600, provider: "gw"))
            #expect(reply.errorName == nil, "\(reply)")
            return (access, refresh)
        }

        /// Forces `rounds` refreshes of alice's token (asking for one valid `minValid` seconds)
        /// and expects a new token from each; `first` is the token before.
        func forceRefreshes(_ rounds: Int, minValid: Int, after first: String) async throws {
            var seen = [first]
            for round in 1...rounds {
                let token = try await tokenctl(["token", "alice", "--min-valid", "\(minValid)"])
                #expect(token.status == 0, "round \(round): \(token.stderr) \(daemon.log.suffix(1500))")
                let value = token.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
                #expect(!seen.contains(value), "round \(round) gave a new token")
                seen.append(value)
                if round < rounds { try await Task.sleep(for: .milliseconds(1500)) }  // forced_refresh_interval
            }
        }

        /// Removes alice, expects her refresh token revoked at glewlwyd, stops everything, and
        /// expects no line of the client's private key in the daemon's log.
        func removeAliceRevokingWithoutLoggingTheKey() async throws {
            let removed = try await tokenctl(["remove", "alice"])
            #expect(removed.status == 0, "\(removed.stderr)")
            #expect(daemon.log.contains("refresh token revoked"), "\(daemon.log.suffix(1500))")
            try await stop()
            let key = try String(contentsOfFile: server.clientKeyFile, encoding: .utf8)
            let keyBody = key.split(separator: "\n").filter { !$0.hasPrefix("-----") }
            #expect(keyBody.count > 1)
            for line in keyBody { #expect(!daemon.log.contains(line), "the daemon logged the client's key") }
        }

        func stop() async throws {
            try await daemon.stop()
            await server.stop()
        }
    }

    /// With rotation (every refresh token used once), each refresh tokend runs spends the
    /// token it holds and keeps the new one: three refreshes in a row all succeed.
    @Test func refreshesWithRotationFoundByDiscovery() async throws {
        let setup = try await Setup.start(["--refresh-token-one-use", "always", "--access-token-lifetime", "600"])
        let (first, seeded) = try await setup.addAlice()
        try await setup.forceRefreshes(3, minValid: 1200, after: first)
        // The seeded refresh token was spent by the first refresh; glewlwyd refuses it now.
        let spent = try await setup.server.refresh(with: seeded)
        #expect(spent.status == 400 || spent.status == 403, "\(spent)")
        let status = try await setup.tokenctl(["status", "alice"])
        #expect(status.stdout.contains("valid"), "\(status.stdout)")
        #expect(!setup.daemon.log.contains(seeded))
        try await setup.stop()
    }

    /// Removing a credential revokes its refresh token at glewlwyd (RFC 7009): the token worked
    /// before and is refused after.
    @Test func removalRevokesTheRefreshToken() async throws {
        let setup = try await Setup.start(["--refresh-token-one-use", "never"])
        let (_, refresh) = try await setup.addAlice()
        let refreshed = try await setup.tokenctl(["token", "alice", "--min-valid", "7200"])
        #expect(refreshed.status == 0, "\(refreshed.stderr)")
        #expect(try await setup.server.refresh(with: refresh).status == 200, "the refresh token works before the removal")
        let removed = try await setup.tokenctl(["remove", "alice"])
        #expect(removed.status == 0, "\(removed.stderr)")
        #expect(setup.daemon.log.contains("refresh token revoked"), "\(setup.daemon.log.suffix(1500))")
        let after = try await setup.server.refresh(with: refresh)
        #expect(after.status == 400 || after.status == 403, "the revoked refresh token is refused: \(after)")
        try await setup.stop()
    }

    /// `tokenctl login --device` against glewlwyd, as a client with a secret, as one with a
    /// key (the device authorization request and the polls carry a client assertion), and as
    /// one with a certificate (glewlwyd started with `--mtls-aliases` accepts it only at the
    /// aliases of its discovery document, so the login works only if tokend uses them): the
    /// user code is approved as alice would, the tokens go from glewlwyd into the store, and
    /// the refresh token from the login works.
    @Test(arguments: [Glewlwyd.Client.secret, .privateKeyJWTEC, .mutualTLS])
    func deviceLoginStoresARefreshableCredential(client: Glewlwyd.Client) async throws {
        let setup = try await Setup.start(["--device-interval", "1"] + (client == .mutualTLS ? ["--mtls-aliases"] : []), client: client)
        try await setup.deviceLogin("bob")
        let first = try await setup.tokenctl(["token", "bob"])
        #expect(first.status == 0, "\(first.stderr)")
        let refreshed = try await setup.tokenctl(["token", "bob", "--min-valid", "7200"])
        #expect(refreshed.status == 0, "\(refreshed.stderr)")
        #expect(!first.stdout.isEmpty && refreshed.stdout != first.stdout)
        try await setup.stop()
    }

    /// `client_auth = "private_key_jwt"` with an EC (ES256) and an RSA (RS256) key: refresh
    /// grants and the revocation at removal authenticate with a signed assertion that glewlwyd
    /// verifies against the client's registered key (aud = its token endpoint, a `jti` it
    /// will not accept twice). The key appears in no log.
    @Test(arguments: [Glewlwyd.Client.privateKeyJWTEC, .privateKeyJWTRSA])
    func privateKeyJWTRefreshesAndRevokes(client: Glewlwyd.Client) async throws {
        let setup = try await Setup.start(["--refresh-token-one-use", "always"], client: client)
        let (first, _) = try await setup.addAlice()
        try await setup.forceRefreshes(2, minValid: 7200, after: first)
        try await setup.removeAliceRevokingWithoutLoggingTheKey()
    }

    /// `client_auth = "tls_client_auth"` (RFC 8705): the client certificate authenticates
    /// grants and revocation. With `--mtls-aliases`, glewlwyd accepts certificates only at the
    /// aliases its discovery document lists (`mtls_endpoint_aliases`), so these refreshes
    /// succeed only if tokend uses them. The key appears in no log.
    @Test(arguments: [false, true])
    func mutualTLSRefreshesAndRevokes(aliases: Bool) async throws {
        let setup = try await Setup.start(
            ["--refresh-token-one-use", "always"] + (aliases ? ["--mtls-aliases"] : []), client: .mutualTLS)
        let (first, _) = try await setup.addAlice()
        try await setup.forceRefreshes(2, minValid: 7200, after: first)
        try await setup.removeAliceRevokingWithoutLoggingTheKey()
    }

    /// glewlwyd ignores `scope` on a refresh grant and answers with the refresh token's whole
    /// scope. tokend does not serve that token as a narrowed one: `RefreshFailed` says the
    /// provider does not narrow, and the credential's own token and refresh go on as before.
    @Test func aProviderThatIgnoresTheNarrowedScopeGetsATypedRefusal() async throws {
        let setup = try await Setup.start(providerExtra: "narrowed_tokens = true")
        let grant = try await setup.server.passwordGrant()
        let access = try #require(grant["access_token"] as? String)
        let client = try RawClient(path: setup.daemon.socketPath)
        let added = try client.call(
            Tokens.addCall(
                user: "alice", access: access, refresh: grant["refresh_token"] as? String, expiresIn: grant["expires_in"] as? Int ?? 3600,
                provider: "gw", scope: grant["scope"] as? String ?? "openid read offline_access"))
        try #require(added.errorName == nil, "\(added)")
        let narrowed = try client.call(Tokens.tokenCall(user: "alice", scope: "read"))
        #expect(narrowed.errorName == "io.tokend.TokenProvider.RefreshFailed", "\(narrowed) \(setup.daemon.log.suffix(2000))")
        let reason = narrowed.parameters["reason"] as? String ?? ""
        #expect(reason.contains("wider than the requested 'read'") && reason.contains("does not narrow tokens"), "\(reason)")
        #expect(setup.daemon.log.contains("narrowed token refused"))
        let main = try client.call(Tokens.tokenCall(user: "alice"))
        #expect(main.accessToken == access, "the credential's own token is unaffected: \(main)")
        try await Task.sleep(for: .milliseconds(1100))  // forced_refresh_interval
        try await setup.forceRefreshes(1, minValid: 7200, after: access)
        try await setup.stop()
    }
}

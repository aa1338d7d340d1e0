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

        /// glewlwyd with `serverArguments`, and a daemon whose provider `gw` finds it by discovery.
        static func start(_ serverArguments: [String] = []) async throws -> Setup {
            try #require(Glewlwyd.isAvailable, "glewlwyd is not installed (scripts/setup-host.sh installs it)")
            let directory = try ScratchDirectory()
            let server = Glewlwyd(directory: directory)
            try await server.start(serverArguments)
            try directory.write("gw-secret", Glewlwyd.clientSecret + "\n", mode: 0o600)
            let provider = """
                [providers.gw]
                kind = "oauth2"
                issuer = "\(server.issuer)"
                ca_file = "\(server.caFile)"
                client_id = "\(Glewlwyd.clientID)"
                client_secret_file = "gw-secret"
                client_auth = "client_secret_basic"
                scope = "openid read offline_access"
                """
            let daemon = try DaemonProcess(
                configuration: DaemonProcess.configuration(extraDaemon: #"forced_refresh_interval = "1s""#, providers: provider),
                directory: directory)
            try await daemon.start()
            return Setup(directory: directory, server: server, daemon: daemon)
        }

        func tokenctl(_ arguments: [String]) async throws -> CommandResult {
            try await runCommand(Repository.binary("tokenctl"), arguments + ["--socket", daemon.socketPath], timeout: .seconds(60))
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
        var seen = [first]
        for round in 1...3 {
            let token = try await setup.tokenctl(["token", "alice", "--min-valid", "1200"])
            #expect(token.status == 0, "round \(round): \(token.stderr) \(setup.daemon.log.suffix(1500))")
            let value = token.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
            #expect(!seen.contains(value), "round \(round) gave a new token")
            seen.append(value)
            if round < 3 { try await Task.sleep(for: .milliseconds(1500)) }  // forced_refresh_interval
        }
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

    /// `tokenctl login --device` against glewlwyd: the user code is approved as alice would,
    /// the tokens go from glewlwyd into the store, and the refresh token from the login works.
    @Test func deviceLoginStoresARefreshableCredential() async throws {
        let setup = try await Setup.start(["--device-interval", "1"])
        let login = try StreamingCommand(
            Repository.binary("tokenctl"), ["login", "bob", "--provider", "gw", "--device", "--socket", setup.daemon.socketPath])
        let userCode = try await login.line(startingWith: "User code: ")
        try await setup.server.approveDevice(userCode: userCode)
        let result = try await login.finish()
        #expect(result.status == 0, "\(result.stdout) \(result.stderr) \(setup.daemon.log.suffix(2000))")
        let first = try await setup.tokenctl(["token", "bob"])
        #expect(first.status == 0, "\(first.stderr)")
        let refreshed = try await setup.tokenctl(["token", "bob", "--min-valid", "7200"])
        #expect(refreshed.status == 0, "\(refreshed.stderr)")
        #expect(!first.stdout.isEmpty && refreshed.stdout != first.stdout)
        try await setup.stop()
    }
}

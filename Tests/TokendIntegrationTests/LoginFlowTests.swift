import Foundation
import Testing

/// `tokenctl login` end to end: the real tokend, the real django-oauth-toolkit IdP (device
/// flow, authorization code with PKCE, OpenID Connect), and the test acting as the user who
/// approves the device code or whose browser follows the redirects.
@Suite(.serialized)
struct LoginFlowTests {
    struct Setup {
        let directory: ScratchDirectory
        let idp: IdentityProvider
        let daemon: DaemonProcess

        static func start(idpArguments: [String] = [], oidc: Bool = false, providers: (IdentityProvider) -> String) async throws -> Setup {
            try requireVenv()
            let directory = try ScratchDirectory()
            let idp = try IdentityProvider(directory: directory, options: .init(oidc: oidc, extraArguments: idpArguments))
            try await idp.start()
            try directory.write("idp-secret", IdentityProvider.clientSecret + "\n", mode: 0o600)
            let config = DaemonProcess.configuration(extraDaemon: "call_timeout = \"10s\"", providers: providers(idp))
            let daemon = try DaemonProcess(configuration: config, directory: directory)
            try await daemon.start()
            return Setup(directory: directory, idp: idp, daemon: daemon)
        }

        func login(_ arguments: [String]) throws -> StreamingCommand {
            try StreamingCommand(Repository.binary("tokenctl"), ["login"] + arguments + ["--socket", daemon.socketPath])
        }

        func tokenctl(_ arguments: [String]) async throws -> CommandResult {
            try await runCommand(Repository.binary("tokenctl"), arguments + ["--socket", daemon.socketPath])
        }

        func stop() async throws {
            try await daemon.stop()
            await idp.stop()
        }
    }

    static func deviceProvider(_ idp: IdentityProvider) -> String {
        """
        [providers.dev]
        kind = "oauth2"
        token_endpoint = "\(idp.baseURL)/o/token/"
        device_authorization_endpoint = "\(idp.baseURL)/o/device-authorization/"
        revocation_endpoint = "\(idp.baseURL)/o/revoke_token/"
        client_id = "tokend-device"
        client_auth = "none"
        scope = "read"
        """
    }

    static func oidcProvider(_ idp: IdentityProvider, extra: String = "") -> String {
        """
        [providers.oidc]
        kind = "oauth2"
        issuer = "\(idp.issuer)"
        client_id = "\(IdentityProvider.clientID)"
        client_secret_file = "idp-secret"
        client_auth = "client_secret_basic"
        scope = "openid read"
        \(extra)
        """
    }

    // MARK: Device flow

    @Test func deviceLoginApprovedStoresAServedAndRefreshableCredential() async throws {
        let setup = try await Setup.start(idpArguments: ["--device-flow", "--device-interval", "1"], providers: Self.deviceProvider)
        let login = try setup.login(["alice", "--provider", "dev", "--device"])
        let userCode = try await login.line(startingWith: "User code: ")
        #expect(login.stdout.contains("To log in, open \(setup.idp.baseURL)/o/device/"))
        try await setup.idp.approveDevice(userCode: userCode)
        let result = try await login.finish()
        #expect(result.status == 0, "\(result.stdout) \(result.stderr) \(setup.daemon.log.suffix(2000))")
        #expect(result.stdout.contains("Logged in: stored the credential of user 'alice' (provider dev)"))

        // Served, and the refresh token from the flow works: a token valid for longer than
        // the provider issues makes tokend refresh.
        let first = try await setup.tokenctl(["token", "alice"])
        #expect(first.status == 0, "\(first.stderr)")
        let refreshed = try await setup.tokenctl(["token", "alice", "--min-valid", "7200"])
        #expect(refreshed.status == 0, "\(refreshed.stderr)")
        #expect(!first.stdout.isEmpty && refreshed.stdout != first.stdout, "a refresh produced a new token")
        let status = try await setup.tokenctl(["status", "alice"])
        #expect(status.stdout.contains("alice"), "\(status.stdout)")

        // The refresh tokens went from the IdP into the store and nowhere else.
        let refreshTokens = try await setup.idp.refreshTokens(client: "tokend-device")
        #expect(refreshTokens.count >= 2)
        for token in refreshTokens {
            #expect(!result.stdout.contains(token) && !result.stderr.contains(token), "tokenctl printed a refresh token")
            #expect(!setup.daemon.log.contains(token), "the daemon logged a refresh token")
            #expect(!first.stdout.contains(token) && !refreshed.stdout.contains(token))
        }
        try await setup.stop()
    }

    @Test func deviceLoginDeniedFailsWithAccessDenied() async throws {
        let setup = try await Setup.start(idpArguments: ["--device-flow", "--device-interval", "1"], providers: Self.deviceProvider)
        let login = try setup.login(["alice", "--provider", "dev", "--device"])
        let userCode = try await login.line(startingWith: "User code: ")
        try await setup.idp.approveDevice(userCode: userCode, deny: true)
        let result = try await login.finish()
        #expect(result.status == 12, "\(result.stdout) \(result.stderr)")
        #expect(result.stderr.contains("the login was denied at the provider"), "\(result.stderr)")
        let token = try await setup.tokenctl(["token", "alice"])
        #expect(token.status == 4, "nothing was stored")
        try await setup.stop()
    }

    @Test func deviceCodeThatExpiresFailsWithExpiredToken() async throws {
        let setup = try await Setup.start(
            idpArguments: ["--device-flow", "--device-interval", "1", "--device-code-lifetime", "3"], providers: Self.deviceProvider
        )
        let login = try setup.login(["alice", "--provider", "dev", "--device"])
        _ = try await login.line(startingWith: "User code: ")
        let result = try await login.finish()
        #expect(result.status == 12, "\(result.stdout) \(result.stderr)")
        #expect(result.stderr.contains("the device code expired"), "\(result.stderr)")
        #expect(setup.daemon.log.contains("login failed"))
        try await setup.stop()
    }

    @Test func slowDownIsHonoured() async throws {
        // The IdP answers the first poll with slow_down and counts every poll that comes
        // sooner than the interval in force (1 s, then 6 s).
        let setup = try await Setup.start(
            idpArguments: ["--device-flow", "--device-interval", "1", "--device-slow-down-first"], providers: Self.deviceProvider
        )
        let login = try setup.login(["alice", "--provider", "dev", "--device"])
        let userCode = try await login.line(startingWith: "User code: ")
        try await setup.idp.approveDevice(userCode: userCode)
        let result = try await login.finish()
        #expect(result.status == 0, "\(result.stdout) \(result.stderr)")
        let polls = try await setup.idp.devicePolls()
        #expect(polls["slow_down"] == 1, "\(polls)")
        #expect(polls["too_early"] == 0, "tokend polled sooner than slow_down allows: \(polls)")
        #expect(polls["polls"] == 2, "\(polls)")
        try await setup.stop()
    }

    // MARK: Authorization code with PKCE, OpenID Connect

    @Test func codeLoginThroughTheLoopbackListenerWithAVerifiedIDToken() async throws {
        let setup = try await Setup.start(oidc: true) { Self.oidcProvider($0) }
        let login = try setup.login(["alice", "--provider", "oidc"])
        let url = try await login.line(after: "Open this URL in a browser to log in:")
        #expect(url.hasPrefix("\(setup.idp.baseURL)/o/authorize/?response_type=code&client_id=tokend-test&redirect_uri="))
        #expect(url.contains("code_challenge_method=S256") && url.contains("&nonce=") && url.contains("&state="))
        // The browser: the IdP (alice is logged in, no consent page) redirects to tokenctl.
        let authorize = try browserGet(url)
        #expect(authorize.status == 302, "\(authorize)")
        let location = try #require(authorize.headers["location"])
        #expect(location.hasPrefix("http://127.0.0.1:") && location.contains("/callback?code="))
        let landing = try browserGet(location)
        #expect(landing.status == 200 && landing.body.contains("Logged in"), "\(landing)")
        let result = try await login.finish()
        #expect(result.status == 0, "\(result.stdout) \(result.stderr) \(setup.daemon.log.suffix(2000))")
        let token = try await setup.tokenctl(["token", "alice"])
        #expect(token.status == 0 && !token.stdout.isEmpty)
        for refreshToken in try await setup.idp.refreshTokens(client: IdentityProvider.clientID) {
            #expect(
                !result.stdout.contains(refreshToken) && !result.stderr.contains(refreshToken) && !setup.daemon.log.contains(refreshToken))
        }
        try await setup.stop()
    }

    @Test func aRedirectWithAnotherStateIsRefused() async throws {
        let setup = try await Setup.start(oidc: true) { Self.oidcProvider($0) }
        // At tokenctl's listener.
        let login = try setup.login(["alice", "--provider", "oidc"])
        let url = try await login.line(after: "Open this URL in a browser to log in:")
        let redirect = try #require(Self.query("redirect_uri", of: url))
        let forged = try browserGet(redirect + "?code=forged&state=not-this-login")
        #expect(forged.status == 400)
        let result = try await login.finish()
        #expect(result.status == 12 && result.stderr.contains("state does not match"), "\(result.stderr)")

        // At the daemon, for a client that skips the listener's check.
        let client = try RawClient(path: setup.daemon.socketPath)
        let begin = try client.call(
            #"{"method":"io.tokend.TokenProvider.BeginLogin","parameters":{"userIdentifier":"alice","provider":"oidc","redirectPort":45678}}"#
        )
        let id = try #require(begin.parameters["loginId"] as? String, "\(begin)")
        let complete = try client.call(
            #"{"method":"io.tokend.TokenProvider.CompleteLogin","parameters":{"loginId":"\#(id)","redirectUrl":"http://127.0.0.1:45678/callback?code=x&state=forged"}}"#
        )
        #expect(complete.errorName == "io.tokend.TokenProvider.LoginFailed", "\(complete)")
        #expect((complete.parameters["reason"] as? String)?.contains("state does not match") == true)
        // A login is completed (or fails) once.
        let again = try client.call(
            #"{"method":"io.tokend.TokenProvider.CompleteLogin","parameters":{"loginId":"\#(id)","redirectUrl":"x"}}"#)
        #expect(again.errorName == "io.tokend.TokenProvider.UnknownLogin", "\(again)")
        try await setup.stop()
    }

    @Test func anOpaqueAccessTokenFailsVerifyAccessToken() async throws {
        // DOT issues opaque access tokens: with verify_access_token the login must fail and
        // store nothing.
        let setup = try await Setup.start(oidc: true) { Self.oidcProvider($0, extra: "verify_access_token = true") }
        let login = try setup.login(["alice", "--provider", "oidc"])
        let url = try await login.line(after: "Open this URL in a browser to log in:")
        let location = try #require(try browserGet(url).headers["location"])
        let landing = try browserGet(location)
        #expect(landing.status == 400)
        let result = try await login.finish()
        #expect(result.status == 12 && result.stderr.contains("the access token is not a signed JWT"), "\(result.stderr)")
        #expect(try await setup.tokenctl(["token", "alice"]).status == 4)
        try await setup.stop()
    }

    // MARK: Who may log in whom

    @Test func aUserLogsInThemselvesButNotSomeoneElse() async throws {
        let setup = try await Setup.start(idpArguments: ["--device-flow", "--device-interval", "1"], providers: Self.deviceProvider)
        let socket = setup.daemon.socketPath
        let (uid, other): (UInt32, UInt32) = (4242, 4343)
        func call(_ json: String, as caller: UInt32) async throws -> [String: Any] {
            try await OtherUser.call(json, socket: socket, uid: caller, gid: caller)
        }
        // Someone else's credential: refused before anything reaches the provider.
        let forRoot = try await call(
            #"{"method":"io.tokend.TokenProvider.BeginLogin","parameters":{"userIdentifier":"root-cred","provider":"dev","readers":["uid:0"]}}"#,
            as: uid)
        #expect(forRoot.errorName == "io.tokend.TokenProvider.PermissionDenied", "\(forRoot)")

        let begin = try await call(
            #"{"method":"io.tokend.TokenProvider.BeginLogin","parameters":{"userIdentifier":"self-cred","provider":"dev"}}"#, as: uid)
        let id = try #require(begin.parameters["loginId"] as? String, "\(begin)")
        let userCode = try #require(begin.parameters["userCode"] as? String)
        #expect(begin.parameters["flow"] as? String == "device")
        // Another uid cannot complete (or cancel) it.
        let stolen = try await call(#"{"method":"io.tokend.TokenProvider.CompleteLogin","parameters":{"loginId":"\#(id)"}}"#, as: other)
        #expect(stolen.errorName == "io.tokend.TokenProvider.PermissionDenied", "\(stolen)")
        try await setup.idp.approveDevice(userCode: userCode)
        let complete = try await call(#"{"method":"io.tokend.TokenProvider.CompleteLogin","parameters":{"loginId":"\#(id)"}}"#, as: uid)
        let credential = try #require(complete.parameters["credential"] as? [String: Any], "\(complete)")
        #expect(credential["readers"] as? [String] == ["uid:4242"])
        #expect(credential["enrolledByUid"] as? Int == 4242)
        #expect(!"\(complete)".contains("accessToken"), "no token in the reply")
        for refreshToken in try await setup.idp.refreshTokens(client: "tokend-device") {
            #expect(!"\(complete)".contains(refreshToken) && !"\(begin)".contains(refreshToken))
        }
        let token = try await call(
            #"{"method":"io.tokend.TokenProvider.ProvideTokenReplacement","parameters":{"userIdentifier":"self-cred"}}"#, as: uid)
        #expect(token.accessToken != nil, "\(token)")
        try await setup.stop()
    }

    static func query(_ name: String, of url: String) -> String? {
        URLComponents(string: url)?.queryItems?.first { $0.name == name }?.value
    }
}

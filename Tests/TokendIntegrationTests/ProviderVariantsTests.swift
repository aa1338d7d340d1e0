import Foundation
import Testing

/// The ways a provider can be configured, each against the real IdP: client authentication
/// methods and OpenID Connect discovery.
@Suite(.serialized)
struct ProviderVariantsTests {
    @Test(arguments: [
        ("client_secret_post", IdentityProvider.clientID, true),
        ("client_secret_basic", IdentityProvider.clientID, true),
        ("none", "tokend-public", false),
    ])
    func clientAuthentication(method: String, clientID: String, hasSecret: Bool) async throws {
        let (directory, idp) = try await Self.startIdP()
        let provider = """
            [providers.example]
            kind = "oauth2"
            token_endpoint = "\(idp.tokenEndpoint)"
            client_id = "\(clientID)"
            client_auth = "\(method)"
            \(hasSecret ? #"client_secret_file = "idp-secret""# : "")
            """
        let (daemon, client, minted) = try await Self.startDaemon(provider, directory: directory, idp: idp, client: clientID)
        let reply = try client.call(Tokens.tokenCall(user: "a", minValid: 7200))
        #expect(reply.accessToken != nil && reply.accessToken != minted["access_token"] as? String, "\(method): \(reply)")
        try await daemon.stop()
        await idp.stop()
    }

    @Test func openIDConnectDiscoveryFindsTheTokenEndpoint() async throws {
        let (directory, idp) = try await Self.startIdP(.init(oidc: true))
        let provider = """
            [providers.example]
            kind = "oauth2"
            issuer = "\(idp.issuer)"
            client_id = "\(IdentityProvider.clientID)"
            client_secret_file = "idp-secret"
            """
        let (daemon, client, minted) = try await Self.startDaemon(provider, directory: directory, idp: idp)
        let before = try await idp.postCount()
        let reply = try client.call(Tokens.tokenCall(user: "a", minValid: 7200))
        #expect(reply.accessToken != nil && reply.accessToken != minted["access_token"] as? String, "\(reply)")
        #expect(try await idp.postCount() == before + 1)
        try await daemon.stop()
        await idp.stop()
    }

    /// The real IdP, started in a new scratch directory that holds its client secret in
    /// `idp-secret`.
    static func startIdP(_ options: IdentityProvider.Options = .init()) async throws -> (ScratchDirectory, IdentityProvider) {
        try requireVenv()
        let directory = try ScratchDirectory()
        let idp = try IdentityProvider(directory: directory, options: options)
        try await idp.start()
        try directory.write("idp-secret", IdentityProvider.clientSecret + "\n", mode: 0o600)
        return (directory, idp)
    }

    /// A daemon with `provider` and one credential, user `a`, minted by `idp` for `client`.
    static func startDaemon(
        _ provider: String, directory: ScratchDirectory, idp: IdentityProvider, client clientID: String = IdentityProvider.clientID
    ) async throws -> (DaemonProcess, RawClient, [String: Any]) {
        let daemon = try DaemonProcess(configuration: DaemonProcess.configuration(providers: provider), directory: directory)
        try await daemon.start()
        let client = try RawClient(path: daemon.socketPath)
        let minted = try await idp.mint(count: 1, client: clientID)[0]
        #expect(
            try client.call(
                Tokens.addCall(user: "a", access: minted["access_token"] as! String, refresh: minted["refresh_token"] as? String)
            ).errorName == nil)
        return (daemon, client, minted)
    }
}

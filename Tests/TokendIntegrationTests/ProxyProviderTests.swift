import Foundation
import Testing
import TokendTestSupport

/// Providers reached only through a real HTTP proxy (Debian's tinyproxy, started by the test on
/// 127.0.0.1): refresh grants and revocation tunnel through it with `CONNECT`, as a provider's
/// `proxy` key or the environment's `https_proxy` says, `no_proxy` goes direct, and a proxy
/// that refuses gives a clear `RefreshFailed` without the proxy's password anywhere.
@Suite(.serialized)
struct ProxyProviderTests {
    static let proxyUser = "tokend"
    static let proxyPassword = "pr0xy-pw-7Qz"

    struct Setup {
        let directory: ScratchDirectory
        let idp: IdentityProvider
        let proxy: Tinyproxy
        /// The IdP's https endpoints by name (`localhost`): through a tunnel, TLS checks the
        /// name, not the proxy's address.
        var tokenEndpoint: String { "https://localhost:\(idp.port)/o/token/" }
        var revocationEndpoint: String { "https://localhost:\(idp.port)/o/revoke_token/" }
        var target: String { "localhost:\(idp.port)" }

        static func start() async throws -> Setup {
            try #require(Tinyproxy.isAvailable, "tinyproxy is not installed (scripts/setup-host.sh installs it)")
            let directory = try ScratchDirectory()
            let idp = try await IdentityProvider.startWithTLS(in: directory)
            try directory.write("proxy-auth", "\(proxyUser):\(proxyPassword)\n", mode: 0o600)
            let proxy = try Tinyproxy(directory: directory, credentials: (proxyUser, proxyPassword))
            try await proxy.start()
            return Setup(directory: directory, idp: idp, proxy: proxy)
        }

        func provider(_ extra: String) -> String {
            """
            [providers.idp]
            kind = "oauth2"
            token_endpoint = "\(tokenEndpoint)"
            revocation_endpoint = "\(revocationEndpoint)"
            client_id = "\(IdentityProvider.clientID)"
            client_secret_file = "idp-secret"
            ca_file = "pki/ca.pem"
            \(extra)
            """
        }

        /// A daemon with `extra` in the provider and one credential, `user`, from the IdP (a
        /// daemon started later in the same directory finds the earlier ones' credentials).
        func daemon(_ extra: String, user: String = "a", environment: [String: String] = [:]) async throws -> (DaemonProcess, RawClient) {
            let daemon = try DaemonProcess(
                configuration: DaemonProcess.configuration(
                    extraDaemon: "http_timeout = \"5s\"\nhttp_connect_timeout = \"2s\"", providers: provider(extra)),
                directory: directory)
            try await daemon.start(environment: environment)
            let client = try RawClient(path: daemon.socketPath)
            let minted = try await idp.mint(count: 1)[0]
            let added = try client.call(
                Tokens.addCall(
                    user: user, access: minted["access_token"] as! String, refresh: minted["refresh_token"] as? String, provider: "idp"))
            #expect(added.errorName == nil, "\(added)")
            return (daemon, client)
        }

        func stop() async {
            await proxy.stop()
            await idp.stop()
        }
    }

    /// `proxy` and `proxy_credentials_file`: the grant (tokend's own HTTP client) and the
    /// revocation at removal (AsyncHTTPClient) both go through the proxy, authenticated.
    @Test func aProvidersProxyCarriesGrantsAndRevocation() async throws {
        let setup = try await Setup.start()
        let (daemon, client) = try await setup.daemon(
            """
            proxy = "\(setup.proxy.url)"
            proxy_credentials_file = "proxy-auth"
            """)
        let before = try await setup.idp.postCount()
        let reply = try client.call(Tokens.tokenCall(user: "a", minValid: 7200))
        #expect(reply.accessToken != nil, "\(reply) \(daemon.log.suffix(1500)) \(setup.proxy.log.suffix(1500))")
        #expect(try await setup.idp.postCount() == before + 1)
        #expect(setup.proxy.connects.contains(setup.target), "\(setup.proxy.connects)")
        let tunnels = setup.proxy.connects.count
        let removed = try client.call(#"{"method":"io.tokend.TokenProvider.RemoveCredential","parameters":{"userIdentifier":"a"}}"#)
        #expect(removed.errorName == nil)
        #expect(daemon.log.contains("refresh token revoked"), "\(daemon.log.suffix(1500))")
        #expect(setup.proxy.connects.count > tunnels, "the revocation went through the proxy too")
        try await daemon.stop()
        #expect(!daemon.log.contains(Self.proxyPassword))
        await setup.stop()
    }

    /// `https_proxy` from the environment (credentials in the URL), and `no_proxy` that
    /// exempts the IdP's host.
    @Test func theEnvironmentsProxyAndNoProxy() async throws {
        let setup = try await Setup.start()
        let withCredentials = "http://\(Self.proxyUser):\(Self.proxyPassword)@127.0.0.1:\(setup.proxy.port)"
        let (daemon, client) = try await setup.daemon("", environment: ["https_proxy": withCredentials])
        let reply = try client.call(Tokens.tokenCall(user: "a", minValid: 7200))
        #expect(reply.accessToken != nil, "\(reply) \(daemon.log.suffix(1500))")
        #expect(setup.proxy.connects.contains(setup.target), "\(setup.proxy.connects)")
        #expect(daemon.log.contains("providers are reached through the environment's proxy"))
        try await daemon.stop()
        #expect(!daemon.log.contains(Self.proxyPassword), "the proxy's password is in the log")

        let tunnels = setup.proxy.connects.count
        let (direct, directClient) = try await setup.daemon(
            "", user: "b", environment: ["https_proxy": withCredentials, "no_proxy": "localhost"])
        let directReply = try directClient.call(Tokens.tokenCall(user: "b", minValid: 7200))
        #expect(directReply.accessToken != nil, "\(directReply) \(direct.log.suffix(1500))")
        #expect(setup.proxy.connects.count == tunnels, "no_proxy went direct")
        try await direct.stop()
        await setup.stop()
    }

    /// A proxy that refuses the tunnel (wrong password), one that is not there, and one that
    /// accepts the connection and never answers: a typed `RefreshFailed` naming the proxy and
    /// what happened, within the call's time, and the refresh token is not spent (nothing
    /// reached the IdP).
    @Test func aProxyThatRefusesOrIsAbsentGivesAClearReason() async throws {
        let setup = try await Setup.start()
        try setup.directory.write("wrong-auth", "\(Self.proxyUser):wrong-password\n", mode: 0o600)
        let absent = try FreePort.pick()
        let (silent, silentPort) = try FreePort.listen()
        defer { close(silent) }
        for (user, extra, expected) in [
            (
                "a", "proxy = \"\(setup.proxy.url)\"\nproxy_credentials_file = \"wrong-auth\"",
                "refused the tunnel to \(setup.target): 401 Unauthorized (check proxy_credentials_file"
            ),
            ("b", "proxy = \"http://127.0.0.1:\(absent)\"", "cannot reach the proxy http://127.0.0.1:\(absent)"),
            ("c", "proxy = \"http://127.0.0.1:\(silentPort)\"", "did not open a tunnel to \(setup.target) in time"),
        ] {
            let (daemon, client) = try await setup.daemon(extra, user: user)
            let before = try await setup.idp.postCount()
            let reply = try client.call(Tokens.tokenCall(user: user, minValid: 7200))
            #expect(reply.errorName == "io.tokend.TokenProvider.RefreshFailed", "\(reply)")
            let reason = reply.parameters["reason"] as? String ?? ""
            #expect(reason.contains(expected), "\(reason)")
            #expect(!reason.contains("wrong-password") && !daemon.log.contains("wrong-password"))
            #expect(try await setup.idp.postCount() == before, "nothing reached the IdP")
            try await daemon.stop()
        }
        await setup.stop()
    }
}

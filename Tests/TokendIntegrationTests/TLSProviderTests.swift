import Foundation
import Testing

/// Token endpoints behind TLS with a CA the test generates: trusted only when configured.
@Suite(.serialized)
struct TLSProviderTests {
    @Test func theConfiguredCAIsTrustedAndNothingElse() async throws {
        let directory = try ScratchDirectory()
        let idp = try await IdentityProvider.startWithTLS(in: directory)
        let providers =
            idp.providerConfiguration(name: "trusted", extra: "ca_file = \"pki/ca.pem\"") + "\n"
            + idp.providerConfiguration(name: "untrusted")
        let daemon = try DaemonProcess(
            configuration: DaemonProcess.configuration(extraDaemon: "http_timeout = \"3s\"", providers: providers), directory: directory)
        try await daemon.start()
        let client = try RawClient(path: daemon.socketPath)
        let minted = try await idp.mint(count: 2)
        for (user, provider, response) in [("a", "trusted", minted[0]), ("b", "untrusted", minted[1])] {
            let reply = try client.call(
                Tokens.addCall(
                    user: user, access: response["access_token"] as! String,
                    refresh: response["refresh_token"] as? String, provider: provider))
            #expect(reply.errorName == nil)
        }
        let trusted = try client.call(Tokens.tokenCall(user: "a", minValid: 7200))
        #expect(trusted.accessToken != nil && trusted.accessToken != minted[0]["access_token"] as? String, "\(trusted)")
        let untrusted = try client.call(Tokens.tokenCall(user: "b", minValid: 7200))
        #expect(untrusted.errorName == "io.tokend.TokenProvider.RefreshFailed")
        #expect((untrusted.parameters["reason"] as? String)?.contains("TLS") == true, "\(untrusted)")
        try await daemon.stop()
        await idp.stop()
    }

    @Test func plainHTTPToANonLoopbackHostIsRefusedAtStartUp() async throws {
        let directory = try ScratchDirectory()
        try directory.write(
            "plain.toml",
            DaemonProcess.configuration(
                providers: """
                    [providers.example]
                    kind = "oauth2"
                    token_endpoint = "http://idp.example.com/token"
                    client_id = "c"
                    client_auth = "none"
                    """))
        let result = try await runCommand(Repository.binary("tokend"), ["--config", directory.file("plain.toml")])
        #expect(result.status == 78)
        #expect(result.stderr.contains("providers.example.token_endpoint: refusing plain http to idp.example.com"), "\(result.stderr)")
    }
}

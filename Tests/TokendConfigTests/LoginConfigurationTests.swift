import Testing
import TokendCore

@testable import TokendConfig

struct LoginConfigurationTests {
    func provider(_ lines: String) throws(ConfigurationError) -> OAuth2Settings? {
        let config = try parseConfig(
            """
            [providers.p]
            kind = "oauth2"
            issuer = "https://idp.example/o"
            client_id = "c"
            client_auth = "none"
            \(lines)
            """)
        guard case .oauth2(let settings)? = config.providers["p"]?.kind else { return nil }
        return settings
    }

    @Test func loginKeysAreRead() throws {
        let settings = try #require(
            try provider(
                """
                authorization_endpoint = "https://idp.example/authorize"
                device_authorization_endpoint = "https://idp.example/device"
                scopes = ["openid", "read"]
                redirect_port = 8123
                verify_access_token = true
                audience = "api"
                """))
        #expect(settings.authorizationEndpoint == "https://idp.example/authorize")
        #expect(settings.deviceAuthorizationEndpoint == "https://idp.example/device")
        #expect(settings.scope == "openid read")
        #expect(settings.redirectPort == 8123 && settings.verifyAccessToken && settings.audience == "api")
        let defaults = try #require(try provider(""))
        #expect(defaults.authorizationEndpoint == nil && defaults.redirectPort == nil && !defaults.verifyAccessToken)
    }

    @Test(arguments: [
        #"authorization_endpoint = "http://idp.example/authorize""#,
        #"device_authorization_endpoint = "ftp://idp.example/device""#,
        "redirect_port = 70000",
        "verify_access_token = \"yes\"",
        "scope = \"a\"\nscopes = [\"b\"]",
    ])
    func badLoginKeysAreRefused(line: String) {
        #expect(throws: ConfigurationError.self) { _ = try provider(line) }
    }
}

import Testing
import TokendCore

@testable import TokendOAuth

struct FormEncodingTests {
    @Test(arguments: [
        ("abc-._*XYZ019", "abc-._*XYZ019"),
        ("a b", "a+b"),
        ("a+b&c=d/e", "a%2Bb%26c%3Dd%2Fe"),
        ("é", "%C3%A9"),
        ("~", "%7E"),
    ])
    func escapes(input: String, expected: String) {
        #expect(FormEncoding.escape(input) == expected)
    }

    @Test func encodesFieldsInOrder() {
        #expect(
            FormEncoding.encode([("grant_type", "refresh_token"), ("refresh_token", "a/b+c")])
                == "grant_type=refresh_token&refresh_token=a%2Fb%2Bc")
    }

    @Test func basicAuthorizationFormEncodesBeforeBase64() {
        // RFC 6749 §2.3.1: client id and secret are form-encoded, then joined by ':'.
        #expect(FormEncoding.basicAuthorization(clientID: "client", secret: "s3cr:t") == "Basic Y2xpZW50OnMzY3IlM0F0")
        #expect(FormEncoding.base64(Array("a".utf8)) == "YQ==")
        #expect(FormEncoding.base64(Array("ab".utf8)) == "YWI=")
        #expect(FormEncoding.base64(Array("abc".utf8)) == "YWJj")
    }

    @Test func discoveryDocumentsMustNameTheIssuerAskedFor() throws {
        let body = Array(
            #"{"issuer":"https://idp.example.com/","token_endpoint":"https://idp.example.com/token","revocation_endpoint":"https://idp.example.com/revoke"}"#
                .utf8)
        let metadata = try OIDCDiscovery.parse(body, expectedIssuer: "https://idp.example.com")
        #expect(metadata.tokenEndpoint == "https://idp.example.com/token")
        #expect(metadata.revocationEndpoint == "https://idp.example.com/revoke")
        #expect(throws: DiscoveryError.self) { try OIDCDiscovery.parse(body, expectedIssuer: "https://evil.example.com") }
        #expect(throws: DiscoveryError.self) {
            try OIDCDiscovery.parse(Array(#"{"issuer":"https://idp.example.com"}"#.utf8), expectedIssuer: "https://idp.example.com")
        }
    }
}

import Testing
import TokendJSON

@testable import TokendCore

/// What a misbehaving token endpoint may not do to a credential (issue 8, points 3 and 6).
struct HostileServerTests {
    static func jwt(sub: String?, exp: Int64 = 1_003_600) -> String {
        var claims = #"{"iat":1000000,"exp":\#(exp)"#
        if let sub { claims += #","sub":"\#(sub)""# }
        claims += "}"
        return "eyJhbGciOiJub25lIn0." + Base64URL.encode(Array(claims.utf8)) + ".c2ln"
    }

    static func response(access: String) throws -> TokenResponse {
        try TokenResponse.parse(
            Array(#"{"access_token":"\#(access)","token_type":"Bearer","expires_in":3600,"refresh_token":"next-refresh-token"}"#.utf8))
    }

    @Test func aTokenForAnotherSubjectIsRefused() throws {
        let credential = makeCredential(accessToken: Self.jwt(sub: "alice"))
        #expect(throws: TokenResponseError.self) {
            try credential.refreshed(with: try Self.response(access: Self.jwt(sub: "mallory")), receivedAt: ts(1_000_100))
        }
        // The same subject, or a side that names none (opaque tokens), is accepted.
        let same = try credential.refreshed(
            with: try Self.response(access: Self.jwt(sub: "alice", exp: 1_007_200)), receivedAt: ts(1_000_100))
        #expect(same.refreshToken?.value == "next-refresh-token")
        _ = try credential.refreshed(with: try Self.response(access: "opaque-token"), receivedAt: ts(1_000_100))
        _ = try makeCredential().refreshed(with: try Self.response(access: Self.jwt(sub: "mallory")), receivedAt: ts(1_000_100))
        _ = try credential.refreshed(with: try Self.response(access: Self.jwt(sub: nil)), receivedAt: ts(1_000_100))
    }

    @Test func echoedSecretsAreRedacted() {
        let secret = "RT-0123456789abcdefghij"
        #expect(
            SecretRedaction.redact("invalid_grant: refresh token \(secret) is not valid", secrets: [secret])
                == "invalid_grant: refresh token <redacted> is not valid")
        #expect(SecretRedaction.redact("\(secret)/\(secret)", secrets: [secret]) == "<redacted>/<redacted>")
        // Cut short inside the token (descriptions are limited to 300 characters).
        #expect(SecretRedaction.redact("bad token RT-0123456789ab", secrets: [secret]) == "bad token <redacted>")
        // Short secrets and text without secrets are left alone.
        #expect(SecretRedaction.redact("invalid_grant: expired", secrets: [secret, "abc"]) == "invalid_grant: expired")
        #expect(SecretRedaction.redact("abc abc", secrets: ["abc"]) == "abc abc")
    }
}

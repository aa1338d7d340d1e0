import Testing
import TokendJSON

@testable import TokendOAuth

/// What the audit trail records of a token: its `jti` and the start of its SHA-256, which the
/// other side computes the same way (`printf %s "$TOKEN" | sha256sum | cut -c1-16`).
struct TokenFingerprintTests {
    @Test func anOpaqueTokenHasTheStartOfItsSHA256() {
        // printf %s 'abc' | sha256sum → ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad
        let fingerprint = TokenFingerprint(of: "abc")
        #expect(fingerprint.sha256 == "ba7816bf8f01cfea")
        #expect(fingerprint.jti == nil)
    }

    static func jwt(_ payload: String) -> String {
        Base64URL.encode(Array(#"{"alg":"RS256","typ":"JWT"}"#.utf8)) + "." + Base64URL.encode(Array(payload.utf8)) + ".c2lnbmF0dXJl"
    }

    @Test func aJWTHasItsJTI() {
        let token = Self.jwt(#"{"sub":"alice","jti":"a1b2-c3d4","exp":2000000000}"#)
        let fingerprint = TokenFingerprint(of: token)
        #expect(fingerprint.jti == "a1b2-c3d4")
        #expect(fingerprint.sha256.count == 16)
        #expect(fingerprint.sha256 == TokenFingerprint(of: token).sha256)
        #expect(fingerprint.sha256 != TokenFingerprint(of: token + "x").sha256)
    }

    @Test(arguments: [
        #"{"jti":"has a space"}"#, #"{"jti":"new\nline"}"#, #"{"jti":""}"#, #"{"jti":42}"#,
    ])
    func aJTIThatIsNoPrintableLabelIsLeftOut(payload: String) {
        #expect(TokenFingerprint(of: Self.jwt(payload)).jti == nil)
    }

    @Test func aLongJTIIsLeftOut() {
        let long = String(repeating: "x", count: 129)
        #expect(TokenFingerprint(of: Self.jwt(#"{"jti":"\#(long)"}"#)).jti == nil)
        #expect(TokenFingerprint(of: Self.jwt(#"{"jti":"\#(long.dropFirst())"}"#)).jti?.count == 128)
    }

    @Test func theFingerprintNeverContainsTheToken() {
        let token = "SECRETTOKEN0123456789"
        let fingerprint = TokenFingerprint(of: token)
        #expect(!fingerprint.sha256.contains("SECRET"))
        #expect(!"\(fingerprint)".contains(token))
    }
}

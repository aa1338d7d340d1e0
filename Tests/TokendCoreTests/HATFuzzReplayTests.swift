import Testing
import TokendCore
import TokendJSON
import TokendTestSupport

/// Replays `Fuzz/Corpus/fuzz-hat` and `Fuzz/Crashes/fuzz-hat` (see `scripts/fuzz`) without
/// sanitizers, with the invariants of `Fuzz/Sources/fuzz-hat`.
struct HATFuzzReplayTests {
    /// Each input is a token and, base64url-encoded, the payload of an RS256 token. An accepted
    /// token is RS256 with iat ≤ exp; `check` with its own issuer and application accepts it
    /// exactly when exp lies after the time given; no error message quotes the token.
    @Test func hatTokenClaims() throws {
        try FuzzInputs.replay("fuzz-hat") { file, bytes in
            let asPayload = Base64URL.encode(Array(#"{"alg":"RS256","kid":"k"}"#.utf8)) + "." + Base64URL.encode(bytes) + ".c2lnbmF0dXJl"
            for token in [String(decoding: bytes, as: UTF8.self), asPayload] {
                do {
                    let claims = try HATTokenClaims.parse(token)
                    #expect(claims.algorithm == "RS256", "\(file)")
                    #expect(claims.issuedAt <= claims.expiresAt, "\(file)")
                    let accepted = try? HATTokenClaims.check(
                        token, address: claims.issuer, application: claims.application, now: claims.issuedAt)
                    #expect((accepted != nil) == (claims.expiresAt > claims.issuedAt), "\(file)")
                    if let accepted { #expect(accepted == claims) }
                } catch {
                    let message = "\(error)"
                    #expect(token.utf8.count < 24 || !message.contains(token), "\(file): an error message quotes the token")
                    #expect(message.utf8.count <= 400)
                }
            }
        }
    }
}

import FuzzSupport
import TokendCore
import TokendJSON

/// The HAT token claim parser (`HATTokenClaims`). The input is taken as a whole token and, base64url
/// encoded, as the payload of an RS256 token, so the claim checks are reached without the fuzzer
/// having to invent base64. Checks: no crash; an accepted token is RS256 with `iat` ≤ `exp`;
/// `check` against the token's own issuer and application accepts it exactly when `exp` lies after
/// the time given; no error message quotes the token.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzHAT(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let bytes = UnsafeBufferPointer(start: data, count: size)
    let asToken = String(decoding: bytes, as: UTF8.self)
    let asPayload = Base64URL.encode(Array(#"{"alg":"RS256","kid":"k"}"#.utf8)) + "." + Base64URL.encode(bytes) + ".c2lnbmF0dXJl"
    for token in [asToken, asPayload] {
        do {
            let claims = try HATTokenClaims.parse(token)
            fuzzCheck(claims.algorithm == HATTokenClaims.algorithm, "accepted a token that is not RS256")
            fuzzCheck(claims.issuedAt <= claims.expiresAt, "accepted iat after exp")
            let accepted = try? HATTokenClaims.check(token, address: claims.issuer, application: claims.application, now: claims.issuedAt)
            fuzzCheck((accepted != nil) == (claims.expiresAt > claims.issuedAt), "check disagrees with exp")
            if let accepted { fuzzCheck(accepted == claims, "check returned other claims than parse") }
        } catch {
            let message = "\(error)"
            fuzzCheck(token.utf8.count < 24 || !message.contains(token), "an error message quotes the token")
            fuzzCheck(message.utf8.count <= 400, "an error message is unbounded")
        }
    }
    return 0
}

@main
enum FuzzHAT {
    static func main() { runLibFuzzer(fuzzHAT) }
}

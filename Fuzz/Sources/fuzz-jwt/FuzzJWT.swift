import FuzzSupport
import TokendCore
import TokendJSON

/// JWT time claims and base64url. The input is taken as a token string (invalid UTF-8 is
/// repaired, as it would be when a token arrives in JSON). Checks: no crash; base64url decoding
/// of an encoding gives back the bytes; a decoded time claim is a sane NumericDate.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzJWT(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let bytes = UnsafeBufferPointer(start: data, count: size)
    let text = String(decoding: bytes, as: UTF8.self)
    if let claims = JWTTimeClaims(jwt: text) {
        for date in [claims.issuedAt, claims.expiresAt].compactMap({ $0 }) {
            fuzzCheck(date.millisecondsSince1970 >= 0 && date.millisecondsSince1970 < 10_000_000_000_000_000, "NumericDate out of range")
        }
    }
    if let decoded = Base64URL.decode(text) {
        fuzzCheck(decoded.count <= text.utf8.count, "base64url decoding grew")
    }
    // Round trip of arbitrary bytes, and as a JWT payload segment.
    let encoded = Base64URL.encode(bytes)
    fuzzCheck(Base64URL.decode(encoded) == Array(bytes), "base64url round trip failed")
    _ = JWTTimeClaims(jwt: "eyJhbGciOiJub25lIn0.\(encoded).")
    return 0
}

@main
enum FuzzJWT {
    static func main() { runLibFuzzer(fuzzJWT) }
}

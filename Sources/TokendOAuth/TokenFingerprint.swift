import Crypto
import TokendCore

/// What the audit trail records about a token instead of the token: enough to find the same
/// token in an identity provider's or an API's logs, nothing that lets anyone present it.
///
/// - `jti`: the token's own identifier, when the token is a JWT that has one; identity providers
///   log it when they issue the token (Keycloak, Okta, Entra ID, most OIDC servers).
/// - `sha256`: the first 16 hex digits (64 bits) of the SHA-256 of the token's bytes, for opaque
///   tokens and for logs that keep a token's hash: `printf %s "$TOKEN" | sha256sum | cut -c1-16`
///   on the side that holds the token gives the same digits. 64 bits tell apart the tokens of
///   a fleet many times over, and a hash of a random token reveals nothing of it.
public struct TokenFingerprint: Sendable, Hashable {
    /// The JWT `jti` claim, if any (read without verifying the signature: it is only a label).
    public let jti: String?
    /// 16 lower-case hex digits.
    public let sha256: String

    /// Hex digits of the digest kept.
    public static let sha256Digits = 16

    /// The fingerprint of `token` (an access token as served).
    public init(of token: String) {
        // A jti is a label chosen by the provider: cut to a sane length, printable ASCII only, so
        // that a hostile token cannot fill or garble the journal.
        jti = JWTTimeClaims(jwt: token)?.tokenID.flatMap(Self.printable)
        let digest = SHA256.hash(data: Array(token.utf8))
        let hex: [Character] = Array("0123456789abcdef")
        sha256 = String(digest.prefix(Self.sha256Digits / 2).flatMap { [hex[Int($0 >> 4)], hex[Int($0 & 0xF)]] })
    }

    /// `text` if it is 1 to 128 printable ASCII characters, else nil.
    static func printable(_ text: String) -> String? {
        guard !text.isEmpty, text.utf8.count <= 128, text.utf8.allSatisfy({ $0 >= 0x21 && $0 <= 0x7E }) else { return nil }
        return text
    }
}

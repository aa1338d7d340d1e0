import TokendJSON

/// The time claims of a JWT, read without verifying its signature.
///
/// tokend reads `iat` and `exp` of access tokens only to plan refreshes; a forged value could at
/// most make tokend refresh earlier or serve no longer than the provider's own `expires_in`
/// allows. Signature verification (HAT, OIDC) happens where tokens are accepted, not here.
public struct JWTTimeClaims: Sendable, Hashable {
    public var issuedAt: Timestamp?
    public var expiresAt: Timestamp?
    public var issuer: String?
    public var subject: String?
    /// `cnf.jkt` (RFC 9449 §6.1): the thumbprint of the DPoP key the token is bound to.
    public var dpopKeyThumbprint: String?
    /// `jti` (RFC 7519 §4.1.7): the token's own identifier, which identity providers log.
    public var tokenID: String?

    /// Reads the claims of a compact JWS (`header.payload.signature`); `nil` when `token` is
    /// not a JWT (an opaque token).
    public init?(jwt token: String) {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let payload = Base64URL.decode(parts[1]),
            case .object(let claims)? = try? JSONParser.parse(payload)
        else { return nil }
        issuedAt = claims["iat"].flatMap(Self.numericDate)
        expiresAt = claims["exp"].flatMap(Self.numericDate)
        issuer = claims["iss"]?.stringValue
        subject = claims["sub"]?.stringValue
        tokenID = claims["jti"]?.stringValue
        if case .object(let confirmation)? = claims["cnf"] { dpopKeyThumbprint = confirmation["jkt"]?.stringValue }
    }

    /// A NumericDate (RFC 7519 §2): seconds since the epoch, possibly fractional.
    static func numericDate(_ value: JSONValue) -> Timestamp? {
        guard let seconds = value.doubleValue, seconds.isFinite, seconds >= 0, seconds < 1e13 else { return nil }
        return Timestamp(millisecondsSince1970: Int64(seconds * 1000))
    }
}

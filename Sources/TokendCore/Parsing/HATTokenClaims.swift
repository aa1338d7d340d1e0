import TokendJSON

/// The claims of a HAT PDA token, checked against the provider's configuration.
///
/// Pure: the token, the expected issuer and application, and the time in; no I/O, no signature
/// check (that needs the PDA's key, see `HATTokenVerifier`). It runs before the signature check,
/// so a token with `alg: none` or `HS256` is refused without ever reaching a crypto library.
public struct HATTokenClaims: Sendable, Hashable {
    /// The header's `alg`; always `RS256` once `check` passed.
    public var algorithm: String
    /// The header's `kid`, when present.
    public var keyID: String?
    /// `iss`: the PDA that issued the token.
    public var issuer: String
    /// `application`: the application the token was issued to.
    public var application: String
    public var subject: String?
    public var issuedAt: Timestamp
    public var expiresAt: Timestamp

    /// The only signature algorithm a PDA uses.
    public static let algorithm = "RS256"
    /// Longer tokens are refused unread (the limit `TokenResponse` applies to any access token).
    public static let maximumLength = 16384

    /// Reads the header and payload and checks `alg`, `iss`, `application` and `exp`.
    /// - Parameters:
    ///   - token: the compact JWS.
    ///   - address: the configured PDA address, which `iss` must equal.
    ///   - application: the configured application name, which `application` must equal.
    ///   - now: the current time; `exp` must lie after it.
    /// - Throws: `HATClaimError`, one case per reason; messages never contain the token.
    public static func check(_ token: String, address: String, application: String, now: Timestamp) throws(HATClaimError) -> HATTokenClaims
    {
        let claims = try parse(token)
        guard claims.issuer == address else { throw .wrongIssuer(expected: address, found: claims.issuer) }
        guard claims.application == application else { throw .wrongApplication(expected: application, found: claims.application) }
        guard claims.expiresAt > now else { throw .expired(at: claims.expiresAt) }
        return claims
    }

    /// Reads the header and payload and checks the structure and `alg`, nothing that depends on
    /// the configuration or the time.
    public static func parse(_ token: String) throws(HATClaimError) -> HATTokenClaims {
        guard token.utf8.count <= maximumLength, token.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else { throw .notAJWT }
        let parts = token.utf8.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard parts.count == 3, !parts[0].isEmpty, !parts[1].isEmpty else { throw .notAJWT }
        guard let headerBytes = Base64URL.decode(Substring(parts[0])), case .object(let header)? = try? JSONParser.parse(headerBytes) else {
            throw .malformedHeader
        }
        guard let algValue = header["alg"] else { throw .missingAlgorithm }
        guard let alg = algValue.stringValue else { throw .unsupportedAlgorithm(Self.printable(algValue.typeName)) }
        switch alg {
        case Self.algorithm: break
        case _ where alg.lowercased() == "none": throw .unsigned
        case _ where alg.uppercased().hasPrefix("HS"): throw .symmetricAlgorithm(Self.printable(alg))
        default: throw .unsupportedAlgorithm(Self.printable(alg))
        }
        // An RS256 token without a signature is as good as unsigned.
        guard !parts[2].isEmpty else { throw .unsigned }
        if let critical = header["crit"], !critical.isNull { throw .unsupportedHeader("crit") }
        guard let payloadBytes = Base64URL.decode(Substring(parts[1])), case .object(let payload)? = try? JSONParser.parse(payloadBytes)
        else {
            throw .malformedPayload
        }
        guard let issuer = payload["iss"]?.stringValue else { throw .missingClaim("iss") }
        guard let application = payload["application"]?.stringValue else { throw .missingClaim("application") }
        guard let expValue = payload["exp"] else { throw .missingClaim("exp") }
        guard let expiresAt = JWTTimeClaims.numericDate(expValue) else { throw .invalidClaim("exp") }
        guard let iatValue = payload["iat"] else { throw .missingClaim("iat") }
        guard let issuedAt = JWTTimeClaims.numericDate(iatValue) else { throw .invalidClaim("iat") }
        guard issuedAt <= expiresAt else { throw .issuedAfterExpiry }
        return HATTokenClaims(
            algorithm: alg, keyID: header["kid"]?.stringValue, issuer: issuer, application: application,
            subject: payload["sub"]?.stringValue, issuedAt: issuedAt, expiresAt: expiresAt
        )
    }

    /// Untrusted text from a token, made safe for a message: printable ASCII, at most 64 characters.
    static func printable(_ text: String) -> String {
        let cleaned = String(text.unicodeScalars.map { $0.isASCII && $0.value >= 0x20 && $0.value < 0x7F ? Character($0) : "?" })
        return cleaned.count > 64 ? String(cleaned.prefix(61)) + "..." : cleaned
    }
}

/// Why a HAT token's header or claims are not acceptable. Each reason has its own case and a
/// message that names what is wrong without quoting the token.
public enum HATClaimError: Error, Sendable, Hashable, CustomStringConvertible {
    case notAJWT
    case malformedHeader
    case malformedPayload
    case missingAlgorithm
    /// `alg: none`, or no signature at all.
    case unsigned
    /// `HS256` and friends: with a PDA's public key as the HMAC secret anyone could forge one.
    case symmetricAlgorithm(String)
    case unsupportedAlgorithm(String)
    case unsupportedHeader(String)
    case missingClaim(String)
    case invalidClaim(String)
    case issuedAfterExpiry
    case wrongIssuer(expected: String, found: String)
    case wrongApplication(expected: String, found: String)
    case expired(at: Timestamp)

    public var description: String {
        switch self {
        case .notAJWT: "the token is not a JWT (three base64url parts of printable ASCII)"
        case .malformedHeader: "the token's header is not a base64url-encoded JSON object"
        case .malformedPayload: "the token's payload is not a base64url-encoded JSON object"
        case .missingAlgorithm: "the token's header has no alg; a PDA signs with RS256"
        case .unsigned: "the token is unsigned (alg none or no signature); a PDA signs with RS256"
        case .symmetricAlgorithm(let alg):
            "the token uses the symmetric algorithm \(alg); a PDA signs with RS256, and a symmetric token could be forged with its public key"
        case .unsupportedAlgorithm(let alg): "the token uses the algorithm \(alg); a PDA signs with RS256"
        case .unsupportedHeader(let name): "the token's header has \(name), which tokend does not support"
        case .missingClaim(let name): "the token has no \(name) claim"
        case .invalidClaim(let name): "the token's \(name) claim is not a valid NumericDate"
        case .issuedAfterExpiry: "the token's iat lies after its exp"
        case .wrongIssuer(let expected, let found):
            "the token was issued by \"\(HATTokenClaims.printable(found))\", not by the configured PDA \"\(expected)\""
        case .wrongApplication(let expected, let found):
            "the token was issued to the application \"\(HATTokenClaims.printable(found))\", not to the configured \"\(expected)\""
        case .expired(let at): "the token expired at \(at.secondsSince1970) (seconds since the epoch)"
        }
    }
}

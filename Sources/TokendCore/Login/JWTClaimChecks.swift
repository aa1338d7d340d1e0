import TokendJSON

/// The header and claims of a compact JWS, decoded but not verified.
public struct DecodedJWT: Sendable, Hashable {
    public var header: JSONObject
    public var claims: JSONObject

    /// Decodes `token`; `nil` when it is not a three-part JWS with JSON object header and payload.
    public init?(_ token: String) {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, !parts[2].isEmpty,
            let headerBytes = Base64URL.decode(parts[0]), case .object(let header)? = try? JSONParser.parse(headerBytes),
            let payloadBytes = Base64URL.decode(parts[1]), case .object(let claims)? = try? JSONParser.parse(payloadBytes)
        else { return nil }
        self.header = header
        self.claims = claims
    }

    /// The header's `alg`.
    public var algorithm: String? { header["alg"]?.stringValue }
    /// The header's `kid`.
    public var keyID: String? { header["kid"]?.stringValue }
}

/// What a JWT from an OpenID Connect provider must say to be accepted: the ID token checks of
/// OpenID Connect Core §3.1.3.7 (and the nonce of §3.1.3.7 item 11), and the same for JWT
/// access tokens (RFC 9068 §4) when a provider is configured to issue them. Pure: the decoded
/// token and the current time in; signature verification happens in TokendOAuth.
public struct JWTExpectations: Sendable, Hashable {
    /// `iss` must equal this (the discovery document's issuer).
    public var issuer: String
    /// `aud` must contain this (the client id for an ID token, the configured audience for an
    /// access token); `nil` skips the audience check.
    public var audience: String?
    /// For an ID token with several audiences, `azp` must be this (the client id).
    public var authorizedParty: String?
    /// `nonce` must equal this (the login's nonce; code flow only).
    public var nonce: String?
    /// What the token is, for messages: "ID token", "access token".
    public var what: String
    /// Clock difference tolerated on `exp`, `nbf` and `iat`.
    public var leeway: Duration

    /// Signature algorithms accepted: asymmetric ones only, so `none` and the HS256
    /// "public key as HMAC secret" confusion are refused before any key is looked at.
    public static let acceptedAlgorithms: Set<String> = [
        "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA",
    ]

    public init(
        issuer: String, audience: String?, authorizedParty: String? = nil, nonce: String? = nil, what: String,
        leeway: Duration = .seconds(60)
    ) {
        self.issuer = issuer
        self.audience = audience
        self.authorizedParty = authorizedParty
        self.nonce = nonce
        self.what = what
        self.leeway = leeway
    }

    /// Checks the header's algorithm; run before the signature is verified.
    /// - Throws: ``LoginError``.
    public func checkAlgorithm(_ jwt: DecodedJWT) throws(LoginError) {
        guard let alg = jwt.algorithm else { throw LoginError("the \(what) has no alg in its header") }
        guard Self.acceptedAlgorithms.contains(alg) else {
            throw LoginError(
                "the \(what) is signed with \(AuthorizationRedirect.printable(alg)), which tokend does not accept (only asymmetric signatures)"
            )
        }
    }

    /// Checks the claims of a token whose signature was verified.
    /// - Throws: ``LoginError`` naming the claim that failed.
    public func checkClaims(_ claims: JSONObject, now: Timestamp) throws(LoginError) {
        guard let iss = claims["iss"]?.stringValue else { throw LoginError("the \(what) has no iss claim") }
        guard Self.sameIssuer(iss, issuer) else {
            throw LoginError("the \(what) was issued by \(AuthorizationRedirect.printable(iss)), not by \(issuer)")
        }
        if let audience {
            let audiences: [String]
            switch claims["aud"] {
            case .string(let single)?: audiences = [single]
            case .array(let many)?: audiences = many.compactMap(\.stringValue)
            default: throw LoginError("the \(what) has no aud claim")
            }
            guard audiences.contains(audience) else { throw LoginError("the \(what) is meant for another audience, not \(audience)") }
            if audiences.count > 1, let authorizedParty, let azp = claims["azp"]?.stringValue, azp != authorizedParty {
                throw LoginError("the \(what)'s azp names another client, not \(authorizedParty)")
            }
        }
        guard let exp = claims["exp"].flatMap(Self.numericDate) else { throw LoginError("the \(what) has no exp claim") }
        guard now < exp + leeway else { throw LoginError("the \(what) has expired") }
        if let nbf = claims["nbf"].flatMap(Self.numericDate), now + leeway < nbf {
            throw LoginError("the \(what) is not valid yet (nbf is in the future)")
        }
        if let iat = claims["iat"].flatMap(Self.numericDate), now + leeway < iat {
            throw LoginError("the \(what) claims to be issued in the future (iat)")
        }
        if let nonce {
            guard let claimed = claims["nonce"]?.stringValue else { throw LoginError("the \(what) has no nonce claim") }
            guard ConstantTime.equal(claimed, nonce) else {
                throw LoginError("the \(what)'s nonce does not match this login (a replayed token?)")
            }
        }
    }

    /// Issuers compare exactly, except for one trailing slash.
    static func sameIssuer(_ a: String, _ b: String) -> Bool {
        (a.hasSuffix("/") ? String(a.dropLast()) : a) == (b.hasSuffix("/") ? String(b.dropLast()) : b)
    }

    static func numericDate(_ value: JSONValue) -> Timestamp? {
        guard let seconds = value.doubleValue, seconds.isFinite, seconds >= 0, seconds < 1e13 else { return nil }
        return Timestamp(millisecondsSince1970: Int64(seconds * 1000))
    }
}

import TokendJSON

/// A successful token endpoint response (RFC 6749 §5.1), as a provider returns it and as
/// `tokenctl add` reads it.
public struct TokenResponse: Sendable, Hashable {
    public var accessToken: SecretString
    public var refreshToken: SecretString?
    public var tokenType: String
    /// `expires_in`, when present and a positive number of seconds.
    public var expiresIn: Duration?
    /// Why an `expires_in` that was present is not used: the token's lifetime is then taken
    /// from its JWT `exp`, or assumed (``lifetime(receivedAt:assumed:)``).
    public var expiresInIgnored: UnusableExpiresIn?
    public var scope: String?
    /// An OpenID Connect ID token, when present.
    public var idToken: SecretString?
    /// `refresh_expires_in` (Keycloak and others), when present and a positive number of
    /// seconds: how long the refresh token works. `0` (an offline token) and unusable values
    /// say nothing.
    public var refreshExpiresIn: Duration?

    public init(
        accessToken: SecretString,
        refreshToken: SecretString? = nil,
        tokenType: String = "Bearer",
        expiresIn: Duration? = nil,
        scope: String? = nil,
        idToken: SecretString? = nil
    ) {
        self.accessToken = accessToken
        self.refreshToken = refreshToken
        self.tokenType = tokenType
        self.expiresIn = expiresIn
        self.scope = scope
        self.idToken = idToken
    }
}

/// Why a token response could not be used. Messages name the field, never its value.
public struct TokenResponseError: Error, Sendable, Hashable, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}

/// An error response from a token endpoint (RFC 6749 §5.2).
public struct TokenErrorResponse: Sendable, Hashable {
    public var error: String
    public var errorDescription: String?

    /// Whether only a new login can help (the grant or the client is no good), as opposed to a
    /// passing failure worth retrying.
    public var isPermanent: Bool {
        ["invalid_grant", "invalid_client", "unauthorized_client", "unsupported_grant_type", "invalid_scope"].contains(error)
    }
}

extension TokenResponse {
    /// Parses a token endpoint's JSON body.
    /// - Throws: `TokenResponseError` when the body is not JSON, not an object, or lacks a usable
    ///   `access_token`; an empty token is an error, never a credential.
    public static func parse(_ body: some Collection<UInt8>) throws(TokenResponseError) -> TokenResponse {
        let value: JSONValue
        do {
            value = try JSONParser.parse(body)
        } catch {
            throw TokenResponseError("the response is not valid JSON (\(error))")
        }
        guard case .object(let object) = value else {
            throw TokenResponseError("the response is \(value.typeName), not a JSON object")
        }
        return try parse(object)
    }

    public static func parse(_ object: JSONObject) throws(TokenResponseError) -> TokenResponse {
        guard let accessValue = object["access_token"] else {
            throw TokenResponseError("the response has no access_token")
        }
        guard let access = accessValue.stringValue, !access.isEmpty else {
            throw TokenResponseError(
                "access_token is \(accessValue.typeName == "a string" ? "empty" : accessValue.typeName), expected a non-empty string")
        }
        guard Self.isPrintableToken(access) else {
            throw TokenResponseError("access_token contains characters a token cannot have")
        }
        var response = TokenResponse(accessToken: SecretString(access))
        if let refresh = object["refresh_token"], !refresh.isNull {
            guard let text = refresh.stringValue, !text.isEmpty, Self.isPrintableToken(text) else {
                throw TokenResponseError("refresh_token is not a non-empty printable string")
            }
            response.refreshToken = SecretString(text)
        }
        if let type = object["token_type"], !type.isNull {
            guard let text = type.stringValue, !text.isEmpty, text.utf8.count <= 64 else {
                throw TokenResponseError("token_type is not a short string")
            }
            response.tokenType = text
        }
        if let expires = object["expires_in"], !expires.isNull {
            // Some servers send expires_in as a string ("3600"). A value that cannot be used does
            // not make the tokens unusable: the provider issued them (and may have rotated the
            // refresh token), so they are kept and the lifetime comes from elsewhere.
            switch expires.int64Value ?? expires.stringValue.flatMap({ Int64($0) }) {
            case nil: response.expiresInIgnored = .notANumber
            case let seconds? where seconds < 0: response.expiresInIgnored = .negative
            case 0: response.expiresInIgnored = .zero
            case let seconds?: response.expiresIn = .seconds(seconds)  // Huge values: max_token_age caps the deadline.
            }
        }
        if let refreshExpires = object["refresh_expires_in"], !refreshExpires.isNull,
            let seconds = refreshExpires.int64Value ?? refreshExpires.stringValue.flatMap({ Int64($0) }), seconds > 0
        {
            response.refreshExpiresIn = .seconds(seconds)
        }
        if let scope = object["scope"], !scope.isNull {
            guard let text = scope.stringValue else { throw TokenResponseError("scope is not a string") }
            response.scope = text
        }
        if let idToken = object["id_token"]?.stringValue, !idToken.isEmpty {
            response.idToken = SecretString(idToken)
        }
        return response
    }

    /// Tokens are printable ASCII (RFC 6749 §A.12 `VSCHAR`); anything else is garbage.
    static func isPrintableToken(_ text: String) -> Bool {
        text.utf8.count <= 16384 && text.utf8.allSatisfy { $0 >= 0x20 && $0 <= 0x7E }
    }

    /// When the access token expires and when it was issued: from the JWT's `exp` and `iat`
    /// when it is a JWT, else from `expires_in` counted from `receivedAt`, else — the provider
    /// did not say — `assumed` from `receivedAt`, with the reason in
    /// ``TokenLifetime/assumedBecause``.
    public func lifetime(receivedAt: Timestamp, assumed: Duration) -> TokenLifetime {
        let claims = JWTTimeClaims(jwt: accessToken.value)
        let issuedAt = claims?.issuedAt ?? receivedAt
        if let exp = claims?.expiresAt { return TokenLifetime(issuedAt: issuedAt, expiresAt: exp) }
        if let expiresIn { return TokenLifetime(issuedAt: issuedAt, expiresAt: receivedAt + expiresIn) }
        return TokenLifetime(
            issuedAt: issuedAt, expiresAt: receivedAt + assumed,
            assumedBecause: expiresInIgnored?.description ?? "the response has neither expires_in nor a JWT exp"
        )
    }

    /// When the refresh token stops working, if the provider says: `refresh_expires_in` counted
    /// from `receivedAt`, else the `exp` of a JWT refresh token; nil when neither is there.
    public func refreshTokenExpiry(receivedAt: Timestamp) -> Timestamp? {
        if let refreshExpiresIn { return receivedAt + refreshExpiresIn }
        return refreshToken.flatMap { JWTTimeClaims(jwt: $0.value)?.expiresAt }
    }

    /// The lifetime a caller states when it hands tokend a token (`AddCredential`): as
    /// ``lifetime(receivedAt:assumed:)``, except that nothing is assumed: `expires_in` 0 is a
    /// token that has already expired, and no usable lifetime at all is an error.
    public func statedLifetime(receivedAt: Timestamp) throws(TokenResponseError) -> TokenLifetime {
        var lifetime = lifetime(receivedAt: receivedAt, assumed: .zero)
        guard lifetime.assumedBecause != nil else { return lifetime }
        guard expiresInIgnored == .zero else {
            throw TokenResponseError("\(lifetime.assumedBecause!), so the token's lifetime is unknown")
        }
        lifetime.assumedBecause = nil
        return lifetime
    }
}

/// An `expires_in` that says nothing usable about when a token expires.
public enum UnusableExpiresIn: Sendable, Hashable, CustomStringConvertible {
    case zero, negative, notANumber

    /// Names the problem, never the value (a server may put anything there).
    public var description: String {
        switch self {
        case .zero: "expires_in is 0"
        case .negative: "expires_in is negative"
        case .notANumber: "expires_in is not a whole number of seconds"
        }
    }
}

/// When a token was issued and when it expires.
public struct TokenLifetime: Sendable, Hashable {
    public var issuedAt: Timestamp
    public var expiresAt: Timestamp
    /// Set when the provider's answer did not say when the token expires and the provider's
    /// `assumed_lifetime` was used instead: why.
    public var assumedBecause: String?

    public init(issuedAt: Timestamp, expiresAt: Timestamp, assumedBecause: String? = nil) {
        self.issuedAt = issuedAt
        self.expiresAt = expiresAt
        self.assumedBecause = assumedBecause
    }
}

extension TokenErrorResponse {
    /// Reads an RFC 6749 §5.2 error body; `nil` when the body is not one.
    public static func parse(_ body: some Collection<UInt8>) -> TokenErrorResponse? {
        guard case .object(let object)? = try? JSONParser.parse(body),
            let error = object["error"]?.stringValue, !error.isEmpty, error.utf8.count <= 128,
            error.utf8.allSatisfy({ $0 >= 0x20 && $0 <= 0x7E })
        else { return nil }
        // The description is free text from the server: keep it short and printable.
        let description = object["error_description"]?.stringValue.map { text in
            String(text.unicodeScalars.filter { $0.value >= 0x20 && $0.value != 0x7F }.prefix(300).map(Character.init))
        }
        return TokenErrorResponse(error: error, errorDescription: description)
    }
}

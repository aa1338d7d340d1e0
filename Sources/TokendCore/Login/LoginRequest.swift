/// The URLs that send a user's browser to log in. Pure: every value is passed in.
public enum LoginRequest {
    /// The authorization request of the code flow (RFC 6749 §4.1.1) with PKCE (RFC 7636 §4.3,
    /// S256 only) and, for OpenID Connect, a nonce.
    public static func authorizationURL(
        endpoint: String, clientID: String, redirectURI: String, scope: String?, state: String, codeChallenge: String, nonce: String?
    ) -> String {
        var items: [(String, String)] = [
            ("response_type", "code"), ("client_id", clientID), ("redirect_uri", redirectURI),
        ]
        if let scope, !scope.isEmpty { items.append(("scope", scope)) }
        items += [("state", state), ("code_challenge", codeChallenge), ("code_challenge_method", "S256")]
        if let nonce { items.append(("nonce", nonce)) }
        return LoginURL.appendingQuery(endpoint, items)
    }

    /// The HAT PDA's login page: `ORIGIN/#/hatlogin?name=APP&redirect=R&fallback=F`. The
    /// redirect and fallback are the application's registered ones (a token carries the
    /// application's permissions only when it goes to the registered redirect).
    public static func hatLoginURL(origin: String, application: String, redirect: String, fallback: String) -> String {
        let query = [("name", application), ("redirect", redirect), ("fallback", fallback)]
            .map { LoginURL.percentEncode($0.0) + "=" + LoginURL.percentEncode($0.1) }.joined(separator: "&")
        return origin + "/#/hatlogin?" + query
    }

    /// Refuses a HAT token issued before this login began (minus `skew` for clock
    /// differences): a token replayed from an earlier login, not this one's.
    /// - Throws: ``LoginError``.
    public static func checkFreshness(token: String, loginStartedAt: Timestamp, skew: Duration = .seconds(120)) throws(LoginError) {
        guard let issuedAt = JWTTimeClaims(jwt: token)?.issuedAt else {
            throw LoginError("the token has no iat, so it cannot be matched to this login")
        }
        guard issuedAt >= loginStartedAt - skew else {
            throw LoginError("the token was issued before this login began (a replayed token?); nothing was stored")
        }
    }

    /// Whether `scope` asks for OpenID Connect.
    public static func requestsOpenID(_ scope: String?) -> Bool {
        scope?.split(separator: " ").contains("openid") ?? false
    }
}

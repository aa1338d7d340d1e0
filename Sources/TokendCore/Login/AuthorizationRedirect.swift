/// Reads the redirect that ends a browser login: the authorization code flow's
/// (RFC 6749 §4.1.2) and the HAT PDA's `hatlogin` one. Pure: the URL and what the login
/// expects in, the code or token (or a clear failure) out.
public enum AuthorizationRedirect {
    /// The authorization code from a redirect to `redirectURI`.
    ///
    /// The redirect must go to the login's own redirect URI and carry its `state` (RFC 6749
    /// §10.12: a redirect with another state is a forged or crossed login and is refused). An
    /// error redirect (§4.1.2.1) fails with the provider's error code.
    /// - Throws: ``LoginError``.
    public static func code(from url: String, redirectURI: String, state expectedState: String) throws(LoginError) -> String {
        guard let target = LoginURL.target(of: url), target == LoginURL.target(of: redirectURI) else {
            throw LoginError("the URL is not the redirect of this login (expected it to start with \(redirectURI))")
        }
        guard let items = LoginURL.queryItems(of: url) else { throw LoginError("the redirect URL's query is malformed") }
        guard let state = try LoginURL.value("state", in: items) else {
            throw LoginError("the redirect carries no state, so it cannot be matched to this login")
        }
        guard ConstantTime.equal(state, expectedState) else {
            throw LoginError("the redirect's state does not match this login (a forged or crossed login); nothing was stored")
        }
        if let error = try LoginURL.value("error", in: items) {
            let description = try LoginURL.value("error_description", in: items).map { ": " + printable($0) } ?? ""
            throw LoginError("the provider refused the login (\(printable(error)))\(description)", oauthError: printable(error))
        }
        guard let code = try LoginURL.value("code", in: items), !code.isEmpty else {
            throw LoginError("the redirect carries no authorization code")
        }
        return code
    }

    /// The token from a HAT PDA's redirect after `hatlogin`.
    ///
    /// A redirect to `redirect` carries the token in its `token` parameter; a redirect to
    /// `fallback` means the PDA refused or the user cancelled.
    /// - Throws: ``LoginError``.
    public static func hatToken(from url: String, redirect: String, fallback: String) throws(LoginError) -> String {
        let target = LoginURL.target(of: url)
        guard let items = LoginURL.queryItems(of: url) else { throw LoginError("the redirect URL's query is malformed") }
        if target != nil, target == LoginURL.target(of: redirect), let token = try LoginURL.value("token", in: items), !token.isEmpty {
            return token
        }
        if target != nil, target == LoginURL.target(of: fallback) {
            let detail = (try LoginURL.value("error", in: items)).map { " (\(printable($0)))" } ?? ""
            throw LoginError(
                "the PDA sent the browser to the fallback URL: the login was refused or cancelled\(detail)", oauthError: "access_denied")
        }
        if target != nil, target == LoginURL.target(of: redirect) {
            throw LoginError("the redirect carries no token parameter")
        }
        throw LoginError("the URL is neither the application's redirect (\(redirect)) nor its fallback")
    }

    /// At most 200 printable ASCII characters of text the provider (or a token) chose.
    public static func printable(_ text: String) -> String {
        String(text.unicodeScalars.filter { $0.value >= 0x20 && $0.value < 0x7F }.prefix(200).map(Character.init))
    }
}

extension Credential {
    /// The credential after a successful refresh grant.
    ///
    /// The new refresh token replaces the old one when the response carries one (rotation);
    /// otherwise the old one stays. `sessionStartedAt` never moves: the login's absolute end is
    /// counted from its first token. `iat` comes from the JWT when there is one, else the time
    /// the response was received.
    ///
    /// When both the current and the new access token are JWTs naming a subject (`sub`), the
    /// subjects must match: a server (or something between) answering with another user's
    /// token must not turn this credential into that user's. Opaque tokens cannot be checked.
    /// When the response does not say when the token expires, `assumedLifetime` is used
    /// (``TokenResponse/lifetime(receivedAt:assumed:)``).
    /// - Throws: `TokenResponseError` when the new token names another subject.
    public func refreshed(
        with response: TokenResponse, receivedAt: Timestamp, assumedLifetime: Duration = RefreshPolicy().assumedLifetime
    ) throws(TokenResponseError) -> Credential {
        if let current = JWTTimeClaims(jwt: accessToken.value)?.subject,
            let new = JWTTimeClaims(jwt: response.accessToken.value)?.subject, current != new
        {
            throw TokenResponseError("the new access token is for another subject than the credential's")
        }
        let lifetime = response.lifetime(receivedAt: receivedAt, assumed: assumedLifetime)
        var next = self
        next.accessToken = response.accessToken
        if let rotated = response.refreshToken { next.refreshToken = rotated }
        // A rotated refresh token has its own expiry (or none stated); a kept one keeps its
        // expiry unless the provider restates it.
        if response.refreshToken != nil || response.refreshExpiresIn != nil {
            next.refreshTokenExpiresAt = response.refreshTokenExpiry(receivedAt: receivedAt)
        }
        next.tokenType = response.tokenType
        if let scope = response.scope { next.scope = scope }
        next.issuedAt = lifetime.issuedAt
        next.expiresAt = lifetime.expiresAt
        next.status = RefreshStatus(
            state: .valid,
            lastRefreshAt: receivedAt,
            lastError: nil,
            refreshCount: status.refreshCount + 1,
            grantStartedAt: nil,
            retryAt: nil
        )
        return next
    }
}

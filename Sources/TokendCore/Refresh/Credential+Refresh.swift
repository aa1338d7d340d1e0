extension Credential {
    /// The credential after a successful refresh grant.
    ///
    /// The new refresh token replaces the old one when the response carries one (rotation);
    /// otherwise the old one stays. `sessionStartedAt` never moves: the login's absolute end is
    /// counted from its first token. `iat` comes from the JWT when there is one, else the time
    /// the response was received.
    /// - Throws: `TokenResponseError` when the response does not say when the token expires.
    public func refreshed(with response: TokenResponse, receivedAt: Timestamp) throws(TokenResponseError) -> Credential {
        let lifetime = try response.lifetime(receivedAt: receivedAt)
        var next = self
        next.accessToken = response.accessToken
        if let rotated = response.refreshToken { next.refreshToken = rotated }
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

/// The date after which no refresh can keep a credential alive, and why: the person must log in
/// again before it.
public struct ReloginDeadline: Sendable, Hashable {
    /// Which end comes first.
    public enum Reason: String, Sendable, Hashable, CaseIterable {
        /// A token nothing can renew (no refresh token, no renewing provider) reaches its
        /// `iat` plus `max_token_age`.
        case maxTokenAge = "max_token_age"
        /// The login's absolute end: `max_session_age`, or a provider whose tokens keep the first
        /// token's `exp` (HAT).
        case sessionEnd = "session_end"
        /// The refresh token's own lifetime, as the provider stated it (`refresh_expires_in`
        /// or the `exp` of a JWT refresh token).
        case refreshTokenExpiry = "refresh_token_expiry"
        /// A token nothing can renew reaches its own `exp` before `max_token_age`.
        case tokenExpiry = "token_expiry"
    }

    /// The last moment the credential can be kept alive without a new login.
    public var at: Timestamp
    public var reason: Reason
    /// Since when this end has been known: warning thresholds that had already passed then are
    /// not said (a login that lasts 20 hours is not greeted with its "1d" warning).
    public var knownSince: Timestamp

    public init(at: Timestamp, reason: Reason, knownSince: Timestamp) {
        (self.at, self.reason, self.knownSince) = (at, reason, knownSince)
    }

    /// The earliest hard end of a credential, or nil when none is known.
    ///
    /// A renewable credential's own token deadline (`exp`, `iat + max_token_age`) is no hard end:
    /// each refresh brings a new `iat` and `exp`. Its hard ends are the login's end and the
    /// refresh token's expiry. A credential nothing can renew ends with its token.
    /// - Parameters:
    ///   - times: the credential's token and login times.
    ///   - policy: its provider's refresh policy.
    ///   - renewable: whether something renews the token (a refresh token, or an exec or HAT
    ///     provider).
    ///   - refreshTokenExpiresAt: the refresh token's expiry, when the provider stated it.
    ///   - refreshTokenIssuedAt: when the current refresh token was received.
    public static func of(
        times: CredentialTimes, policy: RefreshPolicy, renewable: Bool, refreshTokenExpiresAt: Timestamp?,
        refreshTokenIssuedAt: Timestamp
    ) -> ReloginDeadline? {
        var candidates: [ReloginDeadline] = []
        if let end = policy.sessionEnd(of: times) {
            candidates.append(ReloginDeadline(at: end, reason: .sessionEnd, knownSince: times.sessionStartedAt))
        }
        if renewable {
            if let refreshEnd = refreshTokenExpiresAt {
                candidates.append(ReloginDeadline(at: refreshEnd, reason: .refreshTokenExpiry, knownSince: refreshTokenIssuedAt))
            }
        } else {
            let cap = times.issuedAt + policy.maxTokenAge
            candidates.append(
                times.expiresAt < cap
                    ? ReloginDeadline(at: times.expiresAt, reason: .tokenExpiry, knownSince: times.issuedAt)
                    : ReloginDeadline(at: cap, reason: .maxTokenAge, knownSince: times.issuedAt))
        }
        // The earliest; on a tie, the first named (the login's end explains more than a token's).
        return candidates.min { $0.at < $1.at }
    }
}

extension ReloginDeadline {
    /// ``of(times:policy:renewable:refreshTokenExpiresAt:refreshTokenIssuedAt:)`` for a stored
    /// credential; the refresh token counts as received at the last refresh, else at the login.
    public static func of(_ credential: Credential, policy: RefreshPolicy) -> ReloginDeadline? {
        of(
            times: CredentialTimes(of: credential), policy: policy,
            renewable: policy.renewsWithoutRefreshToken || credential.refreshToken != nil,
            refreshTokenExpiresAt: credential.refreshTokenExpiresAt,
            refreshTokenIssuedAt: credential.status.lastRefreshAt ?? credential.sessionStartedAt)
    }
}

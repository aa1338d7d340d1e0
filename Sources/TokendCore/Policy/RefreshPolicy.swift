/// A provider's rules for how long a token may be served and when it is refreshed.
public struct RefreshPolicy: Sendable, Hashable {
    /// A token is refreshed before its own `iat` plus this, whatever its `exp` says.
    public var maxTokenAge: Duration
    /// The absolute end of a login, counted from `sessionStartedAt`; after it only a new login
    /// helps. `nil`: no such end.
    public var maxSessionAge: Duration?
    /// How far ahead of the session's end tokend warns (log and status).
    public var sessionWarningLead: Duration
    /// Refresh when this fraction of the token's lifetime has passed (before jitter).
    public var refreshAtFraction: Double
    /// Never plan a refresh closer to the deadline than this (`refresh_margin`), except for a
    /// token that does not live three times as long: then a third of its lifetime.
    public var minimumMargin: Duration
    /// Random spread added before the planned point (as a fraction of the lifetime), so tokens
    /// issued together are not refreshed together.
    public var jitterFraction: Double
    /// Whether the token's `exp` also ends the login: for providers whose renewed tokens keep
    /// the first token's `exp` (HAT), after which only a new login helps.
    public var expiryEndsSession: Bool = false
    /// The lifetime given to a token whose provider does not say when it expires (no JWT `exp`,
    /// and `expires_in` missing, 0, negative or not a number): `assumed_lifetime`. Short, so a
    /// wrong guess costs little: an API that refuses the token earlier gets a new one through
    /// `rejectedToken`.
    public var assumedLifetime: Duration = .seconds(300)
    /// Whether the provider renews a token without a refresh token (exec, HAT): then a
    /// credential's token deadline is no end of its login (``ReloginDeadline``).
    public var renewsWithoutRefreshToken: Bool = false

    public static let defaultMaxTokenAge: Duration = .seconds(30 * 24 * 3600)

    public init(
        maxTokenAge: Duration = RefreshPolicy.defaultMaxTokenAge,
        maxSessionAge: Duration? = nil,
        sessionWarningLead: Duration = .seconds(3 * 24 * 3600),
        refreshAtFraction: Double = 0.8,
        minimumMargin: Duration = .seconds(10),
        jitterFraction: Double = 0.05
    ) {
        self.maxTokenAge = maxTokenAge
        self.maxSessionAge = maxSessionAge
        self.sessionWarningLead = sessionWarningLead
        self.refreshAtFraction = refreshAtFraction
        self.minimumMargin = minimumMargin
        self.jitterFraction = jitterFraction
    }

    /// The last moment the access token may be served:
    /// `min(exp, iat + max_token_age, sessionStartedAt + max_session_age)`.
    public func deadline(expiresAt: Timestamp, issuedAt: Timestamp, sessionStartedAt: Timestamp) -> Timestamp {
        var deadline = min(expiresAt, issuedAt + maxTokenAge)
        if let maxSessionAge { deadline = min(deadline, sessionStartedAt + maxSessionAge) }
        return deadline
    }

    public func deadline(of credential: Credential) -> Timestamp {
        deadline(expiresAt: credential.expiresAt, issuedAt: credential.issuedAt, sessionStartedAt: credential.sessionStartedAt)
    }

    /// When the login ends for good, if the provider sets an end.
    public func sessionEnd(of credential: Credential) -> Timestamp? {
        sessionEnd(of: CredentialTimes(of: credential))
    }

    /// When to refresh a token that no grant has replaced yet: ``plan(of:jitter:)`` without
    /// the spacing after a last grant.
    public func refreshPoint(of credential: Credential, jitter: Double) -> Timestamp {
        plan(issuedAt: credential.issuedAt, deadline: deadline(of: credential), lastGrantAt: nil, jitter: jitter).refreshAt
    }
}

/// Whether a token can be handed to a caller who needs it valid for a while longer.
public enum ServeDecision: Sendable, Hashable {
    /// Serve the stored token.
    case serve
    /// The token is valid now but not for as long as the caller asked; a refresh is needed.
    case tooShortLived(remaining: Duration)
    /// The deadline has passed.
    case expired
}

extension ServeDecision {
    /// Decides from the deadline, the current time and what the caller asked for.
    public static func decide(deadline: Timestamp, now: Timestamp, minimumValidity: Duration) -> ServeDecision {
        let remaining = deadline - now
        if remaining <= .zero { return .expired }
        if remaining < minimumValidity { return .tooShortLived(remaining: remaining) }
        return .serve
    }
}

/// When one credential is refreshed next, and what the planner noticed about its token.
///
/// Produced by ``RefreshPolicy/plan(issuedAt:deadline:lastGrantAt:jitter:)``, the one rule set
/// that every store mode and every node of a shared store plans with: leases decide *who*
/// refreshes, this decides *when*.
public struct RefreshPlan: Sendable, Hashable {
    /// When the next proactive grant is due (may be in the past: due now).
    public var refreshAt: Timestamp
    /// The token's planned lifetime: from its `iat` to its deadline, zero if that span is empty.
    public var lifetime: Duration
    /// The margin actually kept before the deadline: `refresh_margin`, or a third of the
    /// lifetime when that is less.
    public var margin: Duration
    /// The token lives no longer than the provider's `refresh_margin`, so the margin was
    /// shortened (shown by `tokenctl status` and counted in the metrics).
    public var shorterThanMargin: Bool

    public init(refreshAt: Timestamp, lifetime: Duration, margin: Duration, shorterThanMargin: Bool) {
        self.refreshAt = refreshAt
        self.lifetime = lifetime
        self.margin = margin
        self.shorterThanMargin = shorterThanMargin
    }
}

extension RefreshPolicy {
    /// The margin never exceeds this fraction of a token's lifetime: a 3 s token under a 10 s
    /// `refresh_margin` is refreshed at about 2 s, not at once and again and again.
    public static let maximumMarginFraction = 1.0 / 3.0

    /// Consecutive proactive grants of one credential are at least this fraction of the
    /// token's lifetime apart ...
    public static let minimumSpacingFraction = 0.5

    /// ... and never closer than this, whatever the lifetime.
    public static let minimumSpacing = Duration.milliseconds(500)

    /// When to refresh a token next.
    ///
    /// 1. The planned point is `refresh_at` of the way from `issuedAt` to `deadline`, moved
    ///    earlier by up to `jitter_fraction` of the lifetime (`jitter` in 0...1, drawn by the
    ///    caller), and never later than `deadline - margin`, where the margin is
    ///    `refresh_margin` capped at a third of the lifetime.
    /// 2. It is never earlier than `lastGrantAt` plus half the lifetime (at least 500 ms): a
    ///    grant whose token is no fresher than the last one's does not bring the next grant
    ///    forward, so nothing a provider answers can make the schedule loop.
    ///
    /// Pure: the same inputs give the same plan on every node.
    public func plan(issuedAt: Timestamp, deadline: Timestamp, lastGrantAt: Timestamp?, jitter: Double) -> RefreshPlan {
        let lifetime = max(.zero, deadline - issuedAt)
        let margin = min(minimumMargin, lifetime * Self.maximumMarginFraction)
        let fraction = min(max(refreshAtFraction - jitterFraction * min(max(jitter, 0), 1), 0), 1)
        var refreshAt = min(issuedAt + lifetime * fraction, deadline - margin)
        if let lastGrantAt {
            refreshAt = max(refreshAt, lastGrantAt + max(Self.minimumSpacing, lifetime * Self.minimumSpacingFraction))
        }
        return RefreshPlan(refreshAt: refreshAt, lifetime: lifetime, margin: margin, shorterThanMargin: lifetime <= minimumMargin)
    }

    /// ``plan(issuedAt:deadline:lastGrantAt:jitter:)`` for a stored credential: its deadline
    /// under this policy, its last grant from its status.
    public func plan(of credential: Credential, jitter: Double) -> RefreshPlan {
        plan(
            issuedAt: credential.issuedAt, deadline: deadline(of: credential), lastGrantAt: credential.status.lastRefreshAt, jitter: jitter)
    }

    /// Whether a grant's token is worth having over the one it replaces.
    public func freshness(of new: Credential, replacing old: Credential, receivedAt: Timestamp) -> GrantFreshness {
        let newDeadline = deadline(of: new)
        if newDeadline <= receivedAt { return .expiredOnArrival }
        if newDeadline <= deadline(of: old) { return .noFresher(deadline: newDeadline) }
        return .fresher
    }
}

/// What a successful grant's token is worth compared with the one it replaces.
public enum GrantFreshness: Sendable, Hashable {
    /// Its deadline is later: the usual case.
    case fresher
    /// Valid, but it will not be served longer than the old one (a provider handing out a
    /// cached token, a clock far behind ours). The next grant waits a backoff, not a moment.
    case noFresher(deadline: Timestamp)
    /// Already past its deadline when it arrived (`exp` before our clock's now).
    case expiredOnArrival
}

extension Duration {
    /// The duration scaled by `factor` (≥ 0), in whole milliseconds, saturating.
    static func * (lhs: Duration, rhs: Double) -> Duration {
        let scaled = Double(lhs.milliseconds) * max(rhs, 0)
        guard scaled < Double(Int64.max) else { return .milliseconds(Int64.max) }
        return .milliseconds(Int64(scaled))
    }
}

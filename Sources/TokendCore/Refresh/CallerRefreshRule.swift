/// Whether a caller's request (a minimum validity the token cannot meet, or an API's refusal
/// reported as `rejectedToken`) may start a refresh grant now.
///
/// `forced_refresh_interval` exists so that a client stuck on an API's 401s cannot hammer the
/// provider; it must never leave a caller without a valid token:
/// - a token that is still valid is refreshed at most once per interval for callers; within it,
///   a caller who asked for more validity gets the current token (it is as fresh as the
///   provider makes them), and a caller whose API refused it gets `RefreshFailed` with the time
///   another refresh is allowed;
/// - a token that has expired is always refreshed for a caller, unless refreshing it is already
///   failing (the credential waits for a retry): then one caller-triggered attempt per interval
///   runs, and between them callers get `RefreshFailed` with the failure and the next attempt.
public enum CallerRefreshRule: Sendable, Hashable {
    /// Start (or join) a grant.
    case refresh
    /// Answer with the current token.
    case serveCurrent
    /// The token was refreshed within the interval; another refresh is allowed at `nextAllowed`.
    case refuseRecentlyRefreshed(nextAllowed: Timestamp)
    /// The token has expired and refreshing it is failing; the next attempt is at `retryAt`.
    case refuseFailing(retryAt: Timestamp)

    /// - Parameters:
    ///   - tokenValid: the current token is before its deadline.
    ///   - rejectedByAPI: the caller reported the current token as refused.
    ///   - lastRefreshAt: when the last grant's answer arrived (any node).
    ///   - lastForcedAt: when a caller last started a grant of this credential here.
    ///   - retryAt: when the credential's next retry is due, if its refresh is failing.
    ///   - interval: `forced_refresh_interval`.
    public static func decide(
        tokenValid: Bool, rejectedByAPI: Bool, lastRefreshAt: Timestamp?, lastForcedAt: Timestamp?, retryAt: Timestamp?,
        interval: Duration, now: Timestamp
    ) -> CallerRefreshRule {
        let never = Timestamp(millisecondsSince1970: .min)
        if tokenValid {
            let nextAllowed = max(lastRefreshAt ?? never, lastForcedAt ?? never) + interval
            guard now < nextAllowed else { return .refresh }
            return rejectedByAPI ? .refuseRecentlyRefreshed(nextAllowed: nextAllowed) : .serveCurrent
        }
        guard let retryAt, now < retryAt else { return .refresh }
        let nextForced = (lastForcedAt ?? never) + interval
        return now >= nextForced ? .refresh : .refuseFailing(retryAt: min(retryAt, nextForced))
    }
}

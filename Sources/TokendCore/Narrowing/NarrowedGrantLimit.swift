/// How often callers may make tokend ask a provider for narrowed tokens, whatever they ask.
///
/// One request (scope and resource) gets at most one grant per `interval`
/// (`forced_refresh_interval`), expired or not: a caller that asks for more validity than the
/// provider's tokens have, or that reports every token refused, is no loop. Across requests, a
/// credential gets at most `budget` grants per interval: a caller cycling through resources
/// cannot turn its credential into a stream of grants either.
public enum NarrowedGrantLimit {
    public enum Decision: Sendable, Equatable {
        /// Ask the provider.
        case grant
        /// A grant for the same request was made less than an interval ago: the kept token if
        /// it is still valid and not refused, else a refusal until `nextAllowed`.
        case sameRequestTooSoon(nextAllowed: Timestamp)
        /// The credential's budget for the interval is spent until `nextAllowed`.
        case credentialBudgetSpent(nextAllowed: Timestamp)
    }

    /// - Parameters:
    ///   - lastGrantOfRequest: when this request was last asked of the provider.
    ///   - grantsOfCredential: when any request of the credential was asked of it lately.
    public static func decide(
        lastGrantOfRequest: Timestamp?, grantsOfCredential: some Sequence<Timestamp>, now: Timestamp, interval: Duration,
        budget: Int = NarrowedToken.maxPerCredential
    ) -> Decision {
        if let last = lastGrantOfRequest, now < last + interval { return .sameRequestTooSoon(nextAllowed: last + interval) }
        let recent = grantsOfCredential.filter { $0 > now - interval }.sorted()
        if recent.count >= budget, let oldest = recent.first { return .credentialBudgetSpent(nextAllowed: oldest + interval) }
        return .grant
    }
}

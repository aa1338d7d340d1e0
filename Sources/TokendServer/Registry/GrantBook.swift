import TokendConfig
import TokendCore

/// The refresh executor's books: the grant in flight per credential (single flight), failed
/// grants in a row (backoff), the last refresh a caller forced, and each provider's rate
/// limit. Grant slots are ``GrantSlots``.
struct GrantBook {
    /// Grants in flight by user: every caller that needs the same credential refreshed awaits
    /// the same task.
    var inFlight: [String: Task<GrantResult, Never>] = [:]
    /// Narrowed grants in flight, by user and ``TokenNarrowing/key``: callers asking for the
    /// same narrowed token await the same task.
    var narrowedInFlight: [String: Task<GrantResult, Never>] = [:]
    /// When a narrowed token was last asked of the provider, by user and request key: callers
    /// may not force narrowed grants more often than refreshes.
    private(set) var lastNarrowedGrant: [String: [String: Timestamp]] = [:]
    /// Why the last narrowed grant of a user and request key failed (a token-free reason), told
    /// to callers refused by the interval meanwhile.
    private(set) var lastNarrowedFailure: [String: [String: String]] = [:]
    /// Failed grants in a row, by user; the next attempt's backoff grows with it.
    var failures: [String: Int] = [:]
    /// When a caller last forced a refresh, by user (``CallerRefreshRule``).
    var lastForced: [String: Timestamp] = [:]
    /// Set when the daemon stops: no new proactive grant starts.
    var stoppingProactiveGrants = false
    /// Grants sent, for status and tests.
    var started = 0
    private var buckets: [String: TokenBucket] = [:]

    /// The attempt a failure now would be.
    func nextAttempt(of user: String) -> Int { (failures[user] ?? 0) + 1 }

    /// A credential added, replaced or removed starts with a clean record.
    mutating func forget(_ user: String) {
        failures[user] = nil
        lastForced[user] = nil
        lastNarrowedGrant[user] = nil
        lastNarrowedFailure[user] = nil
    }

    /// Records how the last narrowed grant of `user` for `key` ended: `reason` when it failed.
    mutating func noteNarrowedFailure(of user: String, key: String, _ reason: String?) {
        var mine = lastNarrowedFailure[user] ?? [:]
        mine[key] = reason
        if mine.count > NarrowedToken.maxPerCredential, let keys = lastNarrowedGrant[user] { mine = mine.filter { keys[$0.key] != nil } }
        lastNarrowedFailure[user] = mine.isEmpty ? nil : mine
    }

    /// Records a narrowed grant; the user's records older than `keepingAfter` go, so that a
    /// caller cycling through resources does not grow the book.
    mutating func noteNarrowedGrant(of user: String, key: String, at time: Timestamp, keepingAfter oldest: Timestamp) {
        var mine = lastNarrowedGrant[user] ?? [:]
        if mine.count >= 16 { mine = mine.filter { $0.value > oldest } }
        mine[key] = time
        lastNarrowedGrant[user] = mine
    }

    /// How long a grant to `provider` must wait for its `rate_limit`, its place reserved.
    mutating func rateDelay(for provider: ProviderConfiguration, now: Timestamp) -> Duration {
        var bucket = buckets[provider.name] ?? TokenBucket(ratePerSecond: provider.rateLimit, burst: Double(provider.rateBurst))
        let delay = bucket.reserve(now: now)
        buckets[provider.name] = bucket
        return delay
    }

    /// A reload may change the rate limits: the buckets start again.
    mutating func resetRateLimits() { buckets.removeAll() }
}

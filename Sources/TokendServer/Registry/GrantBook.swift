import TokendConfig
import TokendCore

/// The refresh executor's books: the grant in flight per credential (single flight), failed
/// grants in a row (backoff), the last refresh a caller forced, narrowed grants asked lately,
/// and each provider's rate limit. Grant slots are ``GrantSlots``. Its state changes only
/// through these methods.
struct GrantBook {
    /// Grants in flight by user: every caller that needs the same credential refreshed awaits
    /// the same task.
    private var inFlight: [String: Task<GrantResult, Never>] = [:]
    /// Narrowed grants in flight, by flight key (user and ``TokenNarrowing/key``): callers asking
    /// for the same narrowed token await the same task.
    private var narrowedInFlight: [String: Task<GrantResult, Never>] = [:]
    /// When a narrowed token was last asked of the provider, by user and request key: callers
    /// may not force narrowed grants more often than refreshes.
    private var lastNarrowedGrant: [String: [String: Timestamp]] = [:]
    /// Why the last narrowed grant of a user and request key failed (a token-free reason), told
    /// to callers refused by the interval meanwhile.
    private var lastNarrowedFailure: [String: [String: String]] = [:]
    /// Failed grants in a row, by user; the next attempt's backoff grows with it.
    private var failures: [String: Int] = [:]
    /// When a caller last forced a refresh, by user (``CallerRefreshRule``).
    private var lastForced: [String: Timestamp] = [:]
    /// Set when the daemon stops: no new proactive grant starts.
    private(set) var stoppingProactiveGrants = false
    private var buckets: [String: TokenBucket] = [:]

    // MARK: Single flight

    /// The grant in flight for `user`, if any.
    func grantInFlight(of user: String) -> Task<GrantResult, Never>? { inFlight[user] }

    /// Records `task` as the grant in flight for `user`.
    mutating func startFlight(_ task: Task<GrantResult, Never>, of user: String) { inFlight[user] = task }

    /// The grant of `user` has committed: the next caller starts a new one.
    mutating func endFlight(of user: String) { inFlight[user] = nil }

    /// The narrowed grant in flight under `flight`, if any.
    func narrowedGrantInFlight(_ flight: String) -> Task<GrantResult, Never>? { narrowedInFlight[flight] }

    /// Records `task` as the narrowed grant in flight under `flight`.
    mutating func startNarrowedFlight(_ task: Task<GrantResult, Never>, _ flight: String) { narrowedInFlight[flight] = task }

    /// `task` has answered: it stops being the flight under `flight`, unless another task has
    /// taken its place meanwhile.
    mutating func endNarrowedFlight(_ task: Task<GrantResult, Never>, _ flight: String) {
        if narrowedInFlight[flight] == task { narrowedInFlight[flight] = nil }
    }

    /// Every grant in flight, the credentials' own and narrowed ones.
    var allInFlight: [Task<GrantResult, Never>] { Array(inFlight.values) + Array(narrowedInFlight.values) }

    /// From now on no new proactive grant starts (the daemon is stopping).
    mutating func stopStartingProactiveGrants() { stoppingProactiveGrants = true }

    // MARK: Failures and forced refreshes

    /// The attempt a failure now would be.
    func nextAttempt(of user: String) -> Int { (failures[user] ?? 0) + 1 }

    /// Records that `attempt` grants of `user` have failed in a row (nil: the last grant worked).
    mutating func setFailures(_ attempt: Int?, of user: String) { failures[user] = attempt }

    /// Records one more failed grant of `user` and returns its attempt number.
    mutating func recordFailure(of user: String) -> Int {
        let attempt = nextAttempt(of: user)
        failures[user] = attempt
        return attempt
    }

    /// When a caller last forced a refresh of `user`.
    func lastForcedRefresh(of user: String) -> Timestamp? { lastForced[user] }

    /// Records that a caller forced a refresh of `user` at `time`.
    mutating func noteForcedRefresh(of user: String, at time: Timestamp) { lastForced[user] = time }

    /// A credential added, replaced or removed starts with a clean record.
    mutating func forget(_ user: String) {
        failures[user] = nil
        lastForced[user] = nil
        lastNarrowedGrant[user] = nil
        lastNarrowedFailure[user] = nil
    }

    // MARK: Narrowed grants

    /// When a token narrowed by `key` was last asked of the provider for `user`.
    func lastNarrowedGrant(of user: String, key: String) -> Timestamp? { lastNarrowedGrant[user]?[key] }

    /// When narrowed tokens of `user` were last asked of the provider, one time per request key.
    func narrowedGrants(of user: String) -> [Timestamp] { lastNarrowedGrant[user].map { Array($0.values) } ?? [] }

    /// Why the last narrowed grant of `user` for `key` failed, if it did.
    func lastNarrowedFailure(of user: String, key: String) -> String? { lastNarrowedFailure[user]?[key] }

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

    // MARK: Rate limits

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

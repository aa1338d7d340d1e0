/// The client's in-process token cache: what ``TokendClient`` may answer without asking the
/// daemon.
///
/// Pure: the time is passed in, in seconds since the epoch (the daemon's `expiresAt` is in the
/// same unit, from the same host's clock).
///
/// A cached token answers a request for `minValidity` only while it stays valid that long plus
/// the ``CachePolicy/safetyMargin``, and only within ``CachePolicy/maximumAge`` of being
/// fetched (so a credential removed or replaced at the daemon stops being served soon). A token
/// reported as rejected is dropped, and is never cached again afterwards even if a reply that
/// was already on its way brings it back.
public struct CredentialCache: Sendable {
    /// One cached token.
    public struct Entry: Sendable, Hashable {
        /// The credentials as the daemon sent them.
        public var credentials: Credentials
        /// When they were fetched, in seconds since the epoch.
        public var storedAt: Int64
    }

    /// What the cache does with a request.
    public enum Lookup: Sendable, Hashable {
        /// Answer with these credentials; no round trip.
        case hit(Credentials)
        /// Ask the daemon.
        case miss
    }

    /// How many rejected tokens are remembered per user.
    static let rememberedRejections = 4

    /// The policy in force.
    public let policy: CachePolicy
    private var entries: [String: Entry] = [:]
    private var rejected: [String: [String]] = [:]

    /// An empty cache.
    /// - Parameter policy: when cached tokens may answer.
    public init(policy: CachePolicy) {
        self.policy = policy
    }

    /// The cached entry of `userIdentifier`, valid or not.
    public func entry(for userIdentifier: String) -> Entry? { entries[userIdentifier] }

    /// Decides whether a request can be answered from the cache.
    ///
    /// A `rejectedToken` equal to the cached token drops the entry (the next answer must come
    /// from the daemon, with `rejectedToken`, so it refreshes once). A `rejectedToken` that is
    /// not the cached one is stale: the cached, newer token answers, just as the daemon would.
    /// - Parameters:
    ///   - userIdentifier: whose token.
    ///   - minValiditySeconds: how long the token must stay valid.
    ///   - rejectedToken: the token an API just refused, if any.
    ///   - now: the current time, in seconds since the epoch.
    /// - Returns: the cached credentials, or `.miss`.
    public mutating func lookup(
        _ userIdentifier: String,
        minValiditySeconds: Int64,
        rejectedToken: String? = nil,
        now: Int64
    ) -> Lookup {
        if let rejectedToken { remember(rejected: rejectedToken, for: userIdentifier) }
        guard policy.isEnabled, let entry = entries[userIdentifier] else { return .miss }
        if let rejectedToken, entry.credentials.accessToken == rejectedToken {
            entries[userIdentifier] = nil
            return .miss
        }
        guard isUsable(entry, minValiditySeconds: minValiditySeconds, now: now) else { return .miss }
        return .hit(entry.credentials)
    }

    /// Whether `entry` may answer a request for `minValiditySeconds` at `now`.
    func isUsable(_ entry: Entry, minValiditySeconds: Int64, now: Int64) -> Bool {
        let age = now.subtractingReportingOverflow(entry.storedAt)
        if age.overflow || age.partialValue < 0 || age.partialValue >= policy.maximumAgeSeconds { return false }
        let remaining = entry.credentials.expiresAt.subtractingReportingOverflow(now)
        if remaining.overflow { return entry.credentials.expiresAt > now }
        let needed = max(0, minValiditySeconds).addingReportingOverflow(policy.safetyMarginSeconds)
        if needed.overflow { return false }
        return remaining.partialValue > needed.partialValue
    }

    /// Keeps `credentials`, fetched at `now`, unless they are worse than what is cached.
    ///
    /// A token reported as rejected is never stored; otherwise the token that expires later
    /// wins (replies to concurrent calls can arrive in any order), and a tie goes to the
    /// newer reply.
    /// - Parameters:
    ///   - credentials: the daemon's answer.
    ///   - now: the current time, in seconds since the epoch.
    public mutating func store(_ credentials: Credentials, now: Int64) {
        guard policy.isEnabled else { return }
        let user = credentials.userIdentifier
        if rejected[user]?.contains(credentials.accessToken) == true { return }
        if let existing = entries[user], existing.credentials.accessToken != credentials.accessToken,
            existing.credentials.expiresAt > credentials.expiresAt,
            isUsable(existing, minValiditySeconds: 0, now: now)
        {
            return
        }
        entries[user] = Entry(credentials: credentials, storedAt: now)
    }

    /// Drops the cached token of `userIdentifier` (its credential was removed, or needs a new
    /// login).
    public mutating func remove(_ userIdentifier: String) {
        entries[userIdentifier] = nil
    }

    /// Drops every cached token.
    public mutating func removeAll() {
        entries.removeAll()
        rejected.removeAll()
    }

    private mutating func remember(rejected token: String, for userIdentifier: String) {
        var tokens = rejected[userIdentifier, default: []]
        guard !tokens.contains(token) else { return }
        tokens.append(token)
        if tokens.count > Self.rememberedRejections { tokens.removeFirst(tokens.count - Self.rememberedRejections) }
        rejected[userIdentifier] = tokens
    }
}

/// When ``TokendClient`` may answer from its in-process cache.
public struct CachePolicy: Sendable, Hashable {
    /// Whether tokens are cached at all.
    public var isEnabled: Bool
    /// Extra validity a cached token must have beyond what the caller asks for, against
    /// rounding (`expiresAt` is in whole seconds) and the time a reply takes to be used.
    public var safetyMargin: Duration
    /// How long a cached token may answer at most, however long it stays valid: bounds how
    /// long a credential removed or replaced at the daemon is still served from the cache.
    public var maximumAge: Duration

    /// Creates a policy.
    /// - Parameters:
    ///   - isEnabled: whether to cache (default on).
    ///   - safetyMargin: extra validity required of a cached token (default 5 s).
    ///   - maximumAge: the longest a cached token answers (default 60 s).
    public init(isEnabled: Bool = true, safetyMargin: Duration = .seconds(5), maximumAge: Duration = .seconds(60)) {
        self.isEnabled = isEnabled
        self.safetyMargin = safetyMargin
        self.maximumAge = maximumAge
    }

    /// The default: cache, with a 5 s margin, for at most 60 s.
    public static let `default` = CachePolicy()
    /// No cache: every call is a round trip.
    public static let disabled = CachePolicy(isEnabled: false)

    var safetyMarginSeconds: Int64 { TokendClient.wholeSecondsRoundingUp(safetyMargin) }
    var maximumAgeSeconds: Int64 { max(0, maximumAge.components.seconds) }
}

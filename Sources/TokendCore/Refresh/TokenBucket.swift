/// A token bucket: at most `burst` events at once, refilled at `ratePerSecond`. Pure; the caller
/// passes the time.
public struct TokenBucket: Sendable, Hashable {
    public let ratePerSecond: Double
    public let burst: Double
    private var tokens: Double
    private var updatedAt: Timestamp?

    public init(ratePerSecond: Double, burst: Double) {
        self.ratePerSecond = max(ratePerSecond, 0.000_001)
        self.burst = max(burst, 1)
        self.tokens = max(burst, 1)
    }

    private mutating func refill(now: Timestamp) {
        if let updatedAt, now > updatedAt {
            tokens = min(burst, tokens + Double((now - updatedAt).milliseconds) / 1000 * ratePerSecond)
        }
        if updatedAt == nil || now > updatedAt! { updatedAt = now }
    }

    /// Takes one token if there is one.
    public mutating func tryTake(now: Timestamp) -> Bool {
        refill(now: now)
        guard tokens >= 1 else { return false }
        tokens -= 1
        return true
    }

    /// Takes one token, possibly going into debt, and returns how long the caller must wait
    /// before acting (zero when a token was available). Reserving keeps waiters in order.
    public mutating func reserve(now: Timestamp) -> Duration {
        refill(now: now)
        tokens -= 1
        if tokens >= 0 { return .zero }
        return .milliseconds(Int64((-tokens / ratePerSecond * 1000).rounded(.up)))
    }
}

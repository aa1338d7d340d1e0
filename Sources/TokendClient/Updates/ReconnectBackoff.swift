/// The delays between attempts to reach the daemon again after a connection was lost:
/// exponential, capped, with jitter so that many clients of a restarted daemon do not all come
/// back at the same instant.
///
/// Pure: the randomness is passed in.
public struct ReconnectBackoff: Sendable, Hashable {
    /// The delay before the first new attempt.
    public var initial: Duration
    /// The longest delay.
    public var maximum: Duration
    /// How many attempts failed since the last success.
    public private(set) var failures = 0

    /// Creates a backoff.
    /// - Parameters:
    ///   - initial: the first delay (default 100 ms).
    ///   - maximum: the cap (default 5 s).
    public init(initial: Duration = .milliseconds(100), maximum: Duration = .seconds(5)) {
        self.initial = initial
        self.maximum = max(initial, maximum)
    }

    /// The delay before the next attempt, and counts a failure.
    ///
    /// The base delay doubles with each failure up to ``maximum``; the delay is a random point
    /// in its upper half (`jitter` 0 gives half the base, 1 the whole base).
    /// - Parameter jitter: a number in `0...1`, e.g. `Double.random(in: 0...1)`.
    /// - Returns: how long to wait.
    public mutating func nextDelay(jitter: Double) -> Duration {
        var base = initial
        var doublings = 0
        while doublings < failures, base < maximum {
            base = base * 2
            doublings += 1
        }
        base = min(base, maximum)
        failures += 1
        let fraction = 0.5 + 0.5 * min(1, max(0, jitter))
        return base * fraction
    }

    /// Starts again from ``initial`` (after a success).
    public mutating func reset() {
        failures = 0
    }
}

/// Capped exponential backoff with full jitter, for retrying transient refresh failures.
public struct Backoff: Sendable, Hashable {
    public var initial: Duration
    public var maximum: Duration

    public init(initial: Duration = .seconds(1), maximum: Duration = .seconds(300)) {
        self.initial = initial
        self.maximum = maximum
    }

    /// The delay before retry number `attempt` (1 = first retry): a random point in the upper
    /// half of `min(maximum, initial · 2^(attempt-1))`, or the server's `Retry-After` when that is
    /// longer (capped at one hour). `random` is a value in 0..<1 supplied by the caller.
    public func delay(attempt: Int, retryAfter: Duration? = nil, random: Double) -> Duration {
        let exponent = min(max(attempt - 1, 0), 30)
        let ceiling = min(maximum.milliseconds, initial.milliseconds.saturatingMultiply(Int64(1) << exponent))
        let jittered = Duration.milliseconds(Int64(Double(ceiling) * (0.5 + 0.5 * min(max(random, 0), 1))))
        if let retryAfter { return max(jittered, min(retryAfter, .seconds(3600))) }
        return jittered
    }
}

extension Int64 {
    func saturatingMultiply(_ other: Int64) -> Int64 {
        let (result, overflow) = multipliedReportingOverflow(by: other)
        return overflow ? .max : result
    }
}

/// Which refusals to log: at most one line per uid a minute, carrying how many refusals it
/// stands for, so that a user flooding the daemon produces a trickle of journal lines.
///
/// Pure: the time is passed in.
public struct RefusalReports: Sendable {
    public static let interval = Duration.seconds(60)

    private var lastReported: [UInt32: ContinuousClock.Instant] = [:]
    private var unreported: [UInt32: Int] = [:]

    public init() {}

    /// Records a refusal of `uid` at `now`.
    ///
    /// - Returns: how many refusals the log line written now stands for, or 0 when this one is
    ///   not logged (it is counted in the next line).
    public mutating func record(uid: UInt32, now: ContinuousClock.Instant) -> Int {
        unreported[uid, default: 0] += 1
        if let last = lastReported[uid], now - last < Self.interval { return 0 }
        if lastReported.count > 4096 {
            // Users refused long ago: forget them rather than grow without bound.
            lastReported = lastReported.filter { now - $0.value < Self.interval }
        }
        lastReported[uid] = now
        return unreported.removeValue(forKey: uid) ?? 0
    }
}

/// A point in wall-clock time, in milliseconds since the Unix epoch.
///
/// Token lifetimes are wall-clock facts (`exp`, `iat`), so deadlines are kept in this form and
/// compared with the current wall-clock time on every serve. Time is always passed in.
public struct Timestamp: Sendable, Hashable, Comparable, CustomStringConvertible {
    public var millisecondsSince1970: Int64

    public init(millisecondsSince1970: Int64) { self.millisecondsSince1970 = millisecondsSince1970 }

    public init(secondsSince1970: Int64) {
        self.millisecondsSince1970 =
            secondsSince1970.multipliedReportingOverflow(by: 1000).overflow
            ? (secondsSince1970 < 0 ? .min : .max) : secondsSince1970 * 1000
    }

    /// Whole seconds since the epoch, rounded down.
    public var secondsSince1970: Int64 {
        // Floor division without `ms - 999`, which overflows for the saturated `.min`.
        let (quotient, remainder) = millisecondsSince1970.quotientAndRemainder(dividingBy: 1000)
        return remainder < 0 ? quotient - 1 : quotient
    }

    public static func < (lhs: Timestamp, rhs: Timestamp) -> Bool { lhs.millisecondsSince1970 < rhs.millisecondsSince1970 }

    /// Adds a duration, saturating instead of overflowing (a `max_token_age` of years must not trap).
    public static func + (lhs: Timestamp, rhs: Duration) -> Timestamp {
        let (sum, overflow) = lhs.millisecondsSince1970.addingReportingOverflow(rhs.milliseconds)
        return Timestamp(millisecondsSince1970: overflow ? (rhs > .zero ? .max : .min) : sum)
    }

    public static func - (lhs: Timestamp, rhs: Duration) -> Timestamp { lhs + (.zero - rhs) }

    /// The duration from `rhs` to `lhs` (negative when `lhs` is earlier).
    public static func - (lhs: Timestamp, rhs: Timestamp) -> Duration {
        // Subtracted as `Duration`s (128-bit), so extreme timestamps cannot wrap around.
        .milliseconds(lhs.millisecondsSince1970) - .milliseconds(rhs.millisecondsSince1970)
    }

    public var description: String { "\(millisecondsSince1970)ms" }
}

extension Duration {
    /// The duration in whole milliseconds, rounded toward zero and saturating.
    public var milliseconds: Int64 {
        let (seconds, attoseconds) = components
        let (ms, overflow) = seconds.multipliedReportingOverflow(by: 1000)
        if overflow { return seconds < 0 ? .min : .max }
        let (sum, sumOverflow) = ms.addingReportingOverflow(attoseconds / 1_000_000_000_000_000)
        if sumOverflow { return seconds < 0 ? .min : .max }
        return sum
    }

    /// The duration in whole seconds, rounded toward zero.
    public var wholeSeconds: Int64 { components.seconds }
}

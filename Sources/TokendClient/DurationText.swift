/// Short human renderings of durations and deadlines, as error messages and `tokenctl status` show
/// them. Package-internal: the client library and `tokenctl` share it; it is not public API.
package enum DurationText {
    /// The two largest non-zero units: `2d 3h`, `14m 3s`, `1h`, `42s`, `0s`; negative durations
    /// get a leading `-`.
    /// - Parameter seconds: the duration in seconds.
    /// - Returns: the rendering.
    package static func format(seconds: Int64) -> String {
        if seconds < 0 {
            // `magnitude` keeps Int64.min from trapping.
            return "-" + format(magnitude: seconds.magnitude)
        }
        return format(magnitude: seconds.magnitude)
    }

    private static func format(magnitude seconds: UInt64) -> String {
        let parts: [(UInt64, String)] = [
            (seconds / 86_400, "d"), (seconds % 86_400 / 3_600, "h"), (seconds % 3_600 / 60, "m"), (seconds % 60, "s"),
        ]
        guard let first = parts.firstIndex(where: { $0.0 > 0 }) else { return "0s" }
        var text = "\(parts[first].0)\(parts[first].1)"
        if first + 1 < parts.count, parts[first + 1].0 > 0 {
            text += " \(parts[first + 1].0)\(parts[first + 1].1)"
        }
        return text
    }

    /// How long until `expiresAt`: `14m 3s`, or `expired` once it has passed.
    /// - Parameters:
    ///   - expiresAt: the deadline, in seconds since the epoch.
    ///   - now: the current time, in seconds since the epoch.
    package static func expiresIn(_ expiresAt: Int64, now: Int64) -> String {
        let (remaining, overflow) = expiresAt.subtractingReportingOverflow(now)
        guard !overflow else { return expiresAt > now ? "never" : "expired" }
        return remaining > 0 ? format(seconds: remaining) : "expired"
    }

    /// How long until a scheduled event: `9m 3s`, `due` once it is at or past `now`, or `-`
    /// when nothing is scheduled.
    /// - Parameters:
    ///   - deadline: when the event is scheduled, in seconds since the epoch, if at all.
    ///   - now: the current time, in seconds since the epoch.
    package static func until(_ deadline: Int64?, now: Int64) -> String {
        guard let deadline else { return "-" }
        let (remaining, overflow) = deadline.subtractingReportingOverflow(now)
        guard !overflow else { return deadline > now ? "never" : "due" }
        return remaining > 0 ? format(seconds: remaining) : "due"
    }

    /// How long ago an event happened: `5m 2s ago`, `just now`, or `-` when it never did.
    /// - Parameters:
    ///   - moment: when it happened, in seconds since the epoch, if at all.
    ///   - now: the current time, in seconds since the epoch.
    package static func ago(_ moment: Int64?, now: Int64) -> String {
        guard let moment else { return "-" }
        let (elapsed, overflow) = now.subtractingReportingOverflow(moment)
        guard !overflow, elapsed > 0 else { return "just now" }
        return format(seconds: elapsed) + " ago"
    }
}

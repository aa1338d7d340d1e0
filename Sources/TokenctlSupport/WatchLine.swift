import TokendClient

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// The line `tokenctl watch` prints for each new token.
///
/// `2025-01-31T12:00:00Z alice expires in 59m 58s (at 2025-01-31T12:59:58Z)`, with
/// ` token <access token>` appended only when asked for. Pure: the time is passed in, and
/// times are shown in UTC.
public enum WatchLine {
    /// One line, without a newline.
    /// - Parameters:
    ///   - credentials: the new credentials.
    ///   - now: the current time, in seconds since the epoch.
    ///   - showToken: whether to include the access token.
    /// - Returns: the line.
    public static func render(_ credentials: Credentials, now: Int64, showToken: Bool = false) -> String {
        let user = Redaction.display(credentials.userIdentifier, secrets: [])
        var line = "\(timestamp(now)) \(user) expires in \(DurationText.expiresIn(credentials.expiresAt, now: now))"
        line += " (at \(timestamp(credentials.expiresAt)))"
        if showToken {
            // Whole (tokens are often longer than the cut other texts get), minus control
            // characters that could drive the terminal.
            let printable = credentials.accessToken.unicodeScalars.filter { $0.value >= 0x20 && $0.value != 0x7F }
            line += " token \(String(String.UnicodeScalarView(printable)))"
        }
        return line
    }

    /// `2025-01-31T12:00:00Z`: seconds since the epoch in UTC, ISO 8601.
    /// - Parameter seconds: seconds since the epoch.
    public static func timestamp(_ seconds: Int64) -> String {
        var time = time_t(truncatingIfNeeded: seconds)
        var parts = tm()
        guard gmtime_r(&time, &parts) != nil else { return "\(seconds)" }
        func two(_ value: Int32) -> String { value < 10 ? "0\(value)" : "\(value)" }
        let year = Int(parts.tm_year) + 1900
        return "\(year)-\(two(parts.tm_mon + 1))-\(two(parts.tm_mday))T"
            + "\(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec))Z"
    }
}

#if canImport(Glibc)
    import Glibc
#endif

/// The one-line `STATUS=` summary that `systemctl status tokend` shows, e.g.
/// `serving 1234 credentials, 2 need reauthentication, next refresh 14:05:31`.
public struct StatusLine: Sendable, Hashable {
    /// Credentials held.
    public var credentials: Int
    /// Credentials that need a new login.
    public var reauthenticationRequired: Int
    /// Credentials waiting to retry a failed refresh.
    public var retrying: Int
    /// The next planned refresh, in seconds since 1970, if any.
    public var nextRefresh: Int64?
    /// Why the credential store cannot be reached, if it cannot (tokens are then served from memory).
    public var storeProblem: String?

    /// Creates a summary.
    public init(credentials: Int, reauthenticationRequired: Int, retrying: Int = 0, nextRefresh: Int64? = nil) {
        self.credentials = credentials
        self.reauthenticationRequired = reauthenticationRequired
        self.retrying = retrying
        self.nextRefresh = nextRefresh
    }

    /// The text, with the next refresh as local time of day.
    public var text: String { text(timeOfDay: Self.localTimeOfDay) }

    /// The text, with the next refresh formatted by `timeOfDay` (tests pin the time zone).
    public func text(timeOfDay: (Int64) -> String) -> String {
        var parts = ["serving \(credentials) \(credentials == 1 ? "credential" : "credentials")"]
        parts.append("\(reauthenticationRequired) \(reauthenticationRequired == 1 ? "needs" : "need") reauthentication")
        if retrying > 0 { parts.append("\(retrying) retrying") }
        if let nextRefresh { parts.append("next refresh \(timeOfDay(nextRefresh))") }
        if let storeProblem { parts.append("credential store unavailable: \(storeProblem)") }
        return parts.joined(separator: ", ")
    }

    /// `HH:MM:SS` in the local time zone.
    public static func localTimeOfDay(_ secondsSince1970: Int64) -> String {
        var time = time_t(secondsSince1970)
        var parts = tm()
        guard localtime_r(&time, &parts) != nil else { return "?" }
        return timeOfDay(hour: Int(parts.tm_hour), minute: Int(parts.tm_min), second: Int(parts.tm_sec))
    }

    /// `HH:MM:SS`, zero-padded.
    public static func timeOfDay(hour: Int, minute: Int, second: Int) -> String {
        func two(_ value: Int) -> String { value < 10 ? "0\(value)" : "\(value)" }
        return "\(two(hour)):\(two(minute)):\(two(second))"
    }
}

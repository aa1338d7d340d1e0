import TokendClient

/// The desktop notification `tokenctl notify` posts for a re-login warning
/// (`org.freedesktop.Notifications.Notify`): a summary naming the provider and the date, and a
/// body with the command to run. Pure: the time zone's offset is passed in.
public struct ReloginNotification: Sendable, Hashable {
    /// The application name the notification carries.
    public static let applicationName = "tokend"
    public var summary: String
    public var body: String

    /// - Parameters:
    ///   - warning: what tokend said.
    ///   - utcOffsetSeconds: the local time zone's offset from UTC at `warning.reloginBy`.
    public init(_ warning: ReloginWarning, utcOffsetSeconds: Int64) {
        let date = Self.localTime(warning.reloginBy, utcOffsetSeconds: utcOffsetSeconds)
        summary = "Log in again to \(warning.provider) by \(date)"
        let why =
            switch warning.reason {
            case "max_token_age": "the longest a login may last"
            case "session_end": "the provider ends the login then"
            case "refresh_token_expiry": "its refresh token expires then"
            default: warning.reason
            }
        body = "The credential '\(warning.userIdentifier)' stops working then (\(why)). Run: \(warning.command)"
    }

    /// `YYYY-MM-DD HH:MM` at `utcOffsetSeconds` from UTC, with the offset (`+01:00`) unless it is 0
    /// (then `UTC`).
    public static func localTime(_ epochSeconds: Int64, utcOffsetSeconds: Int64) -> String {
        let local = epochSeconds + utcOffsetSeconds
        let days = local >= 0 ? local / 86_400 : (local - 86_399) / 86_400
        let secondsOfDay = local - days * 86_400
        // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let dayOfEra = z - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let monthIndex = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * monthIndex + 2) / 5 + 1
        let month = monthIndex < 10 ? monthIndex + 3 : monthIndex - 9
        let year = yearOfEra + era * 400 + (month <= 2 ? 1 : 0)
        func two(_ value: Int64) -> String { value < 10 ? "0\(value)" : "\(value)" }
        let zone: String
        if utcOffsetSeconds == 0 {
            zone = "UTC"
        } else {
            let minutes = utcOffsetSeconds.magnitude / 60
            zone = (utcOffsetSeconds < 0 ? "-" : "+") + two(Int64(minutes / 60)) + ":" + two(Int64(minutes % 60))
        }
        return "\(year)-\(two(month))-\(two(day)) \(two(secondsOfDay / 3600)):\(two(secondsOfDay % 3600 / 60)) \(zone)"
    }
}

/// What `tokenctl notify` has shown, kept in `$XDG_STATE_HOME/tokend/notified` (one warning's
/// ``TokendProtocol/ReloginWarning/key`` a line) so that a warning tokend says again (after a
/// reconnection, a restart of either side) is not shown twice. Pure: the caller reads and
/// writes the file.
public struct NotifiedRecord: Sendable, Hashable {
    /// The most lines kept; the oldest go first.
    public static let maximumEntries = 1000
    /// How long after its re-login date a warning is remembered.
    public static let retention: Int64 = 7 * 86_400

    public private(set) var keys: [String] = []

    /// Reads the file's text; lines that are not keys are dropped.
    public init(text: String = "") {
        for line in text.split(separator: "\n") where Self.deadline(of: line) != nil {
            keys.append(String(line))
        }
    }

    /// The file's text.
    public var text: String { keys.map { $0 + "\n" }.joined() }

    public func contains(_ warning: ReloginWarning) -> Bool { keys.contains(warning.key) }

    /// Records `warning` as shown; the oldest entries go beyond ``maximumEntries``.
    public mutating func insert(_ warning: ReloginWarning) {
        guard !contains(warning) else { return }
        keys.append(warning.key)
        if keys.count > Self.maximumEntries { keys.removeFirst(keys.count - Self.maximumEntries) }
    }

    /// Drops the warnings whose re-login date is more than ``retention`` before `now`.
    public mutating func prune(now: Int64) {
        keys.removeAll { (Self.deadline(of: Substring($0)) ?? 0) < now - Self.retention }
    }

    private static func deadline(of line: Substring) -> Int64? {
        let fields = line.split(separator: "\t", omittingEmptySubsequences: false)
        guard fields.count == 3, !fields[0].isEmpty, !fields[2].isEmpty else { return nil }
        return Int64(fields[1])
    }
}

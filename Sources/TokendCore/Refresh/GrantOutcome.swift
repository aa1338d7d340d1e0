import TokendJSON

/// What a token endpoint's answer to a refresh grant means for the credential.
public enum GrantOutcome: Sendable, Hashable {
    /// New tokens.
    case success(TokenResponse)
    /// Only a new login helps (RFC 6749 §5.2 `invalid_grant`, `invalid_client`, …).
    case permanent(error: String, description: String?)
    /// Worth retrying later: a server error, throttling, a broken response. `retryAfter` is the
    /// server's `Retry-After`, when it sent one.
    case transient(reason: String, retryAfter: Duration?)
    /// The request may have reached the provider, but no usable answer came back: a timeout, a
    /// connection closed after sending, a refresher killed mid-run, or a 200 whose tokens cannot
    /// be used (the provider issued them). The provider may have rotated the refresh token
    /// already, so this is retried like `transient` but kept marked as an interrupted grant: a
    /// restart meanwhile recovers it at once, and the grant counts as one whose outcome is
    /// unknown — the same as one cut off by a crash.
    case unanswered(reason: String)
}

extension GrantOutcome {
    /// Classifies an HTTP response to a refresh grant. Pure: status, headers and body in.
    ///
    /// - 200 with a usable token response → success; 200 without `access_token` (or not JSON) →
    ///   unanswered (the server acted on the grant; its tokens cannot be read), never an empty
    ///   credential.
    /// - 400/401 with a permanent RFC 6749 error → permanent; other 4xx errors with an error body
    ///   → permanent only for the listed codes, else transient.
    /// - 429, 5xx → transient, honouring `Retry-After` (seconds or an HTTP date relative to `now`).
    public static func classify(status: Int, retryAfterHeader: String?, body: [UInt8], now: Timestamp) -> GrantOutcome {
        let retryAfter = retryAfterHeader.flatMap { RetryAfter.parse($0, now: now) }
        switch status {
        case 200:
            do {
                return .success(try TokenResponse.parse(body))
            } catch {
                return .unanswered(reason: "the token endpoint answered 200 with an unusable body: \(error)")
            }
        case 429, 500...599:
            return .transient(reason: "the token endpoint answered \(status)", retryAfter: retryAfter)
        case 400...499:
            if let error = TokenErrorResponse.parse(body) {
                if error.isPermanent { return .permanent(error: error.error, description: error.errorDescription) }
                return .transient(reason: "the token endpoint answered \(status) \(error.error)", retryAfter: retryAfter)
            }
            if status == 401 {
                return .permanent(error: "invalid_client", description: "the token endpoint answered 401 without an error body")
            }
            return .transient(reason: "the token endpoint answered \(status) without an RFC 6749 error", retryAfter: retryAfter)
        default:
            return .transient(reason: "the token endpoint answered \(status)", retryAfter: retryAfter)
        }
    }
}

/// Parses `Retry-After` (RFC 9110 §10.2.3): delay-seconds or an HTTP-date.
public enum RetryAfter {
    public static func parse(_ value: String, now: Timestamp) -> Duration? {
        let trimmed = value.trimmingSpaces()
        if let seconds = Int64(trimmed), seconds >= 0 { return .seconds(min(seconds, 86400)) }
        guard let date = HTTPDate.parse(trimmed) else { return nil }
        let delay = date - now
        return delay > .zero ? min(delay, .seconds(86400)) : .zero
    }
}

/// The IMF-fixdate form of HTTP dates (`Sun, 06 Nov 1994 08:49:37 GMT`), the only one servers
/// are required to send.
enum HTTPDate {
    static func parse(_ text: String) -> Timestamp? {
        let parts = text.split(separator: " ")
        // IMF-fixdate years have four digits; a longer one would overflow `daysFromCivil` (found by fuzzing).
        guard parts.count == 6, parts[5] == "GMT", let day = Int(parts[1]), let year = Int(parts[3]), (0...9999).contains(year)
        else { return nil }
        let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
        guard let monthIndex = months.firstIndex(of: String(parts[2])) else { return nil }
        let time = parts[4].split(separator: ":").compactMap { Int($0) }
        guard time.count == 3, (1...31).contains(day), (0...23).contains(time[0]), (0...59).contains(time[1]), (0...60).contains(time[2])
        else { return nil }
        let days = daysFromCivil(year: year, month: monthIndex + 1, day: day)
        return Timestamp(secondsSince1970: Int64(days) * 86400 + Int64(time[0] * 3600 + time[1] * 60 + time[2]))
    }

    /// Days since 1970-01-01 for a proleptic Gregorian date (Howard Hinnant's algorithm).
    static func daysFromCivil(year: Int, month: Int, day: Int) -> Int {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let mp = (month + 9) % 12
        let doy = (153 * mp + 2) / 5 + day - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        return era * 146097 + doe - 719468
    }
}

extension String {
    func trimmingSpaces() -> String {
        var s = Substring(self)
        while s.first == " " || s.first == "\t" { s.removeFirst() }
        while s.last == " " || s.last == "\t" { s.removeLast() }
        return String(s)
    }
}

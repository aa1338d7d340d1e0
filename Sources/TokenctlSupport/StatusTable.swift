import TokendClient
import TokendJSON
import TokendProtocol

/// Renders `Status` replies for people (`tokenctl status`) and for programs (`--json`).
///
/// Pure: the current time is passed in. Every string from the daemon is stripped of control
/// characters before it reaches a terminal.
public enum StatusTable {
    /// The column titles, in order.
    public static let columns = [
        "USER", "PROVIDER", "STATE", "EXPIRES IN", "NEXT REFRESH", "RELOGIN BY", "LAST REFRESH", "REFRESHES", "LAST ERROR",
    ]
    /// The longest `LAST ERROR` shown; the full text is in `--json`.
    public static let maximumErrorLength = 60

    /// The header line and the table.
    /// - Parameters:
    ///   - daemon: the daemon's status, when known; it becomes the header line.
    ///   - credentials: the rows, sorted by user identifier.
    ///   - now: the current time, in seconds since the epoch.
    /// - Returns: the text, ending in a newline.
    public static func render(daemon: DaemonStatus?, credentials: [CredentialStatus], now: Int64) -> String {
        var output = ""
        if let daemon {
            output += header(daemon, now: now) + "\n"
            if let usage = daemon.caller {
                output += usageLine(usage) + "\n"
                if let line = callerLine(usage) { output += line + "\n" }
            }
        }
        guard !credentials.isEmpty else {
            output +=
                daemon == nil || daemon?.credentials == 0
                ? "No credentials.\n" : "No credentials visible to this user.\n"
            return output
        }
        if daemon != nil { output += "\n" }
        let rows = credentials.sorted { $0.userIdentifier < $1.userIdentifier }.map { row($0, now: now) }
        output += table(
            addingLeaseColumn(
                [columns] + rows, sorted: credentials.sorted { $0.userIdentifier < $1.userIdentifier }, shared: daemon?.node != nil,
                now: now))
        let notes = credentials.sorted { $0.userIdentifier < $1.userIdentifier }.flatMap {
            [sessionNote($0, now: now), lifetimeNote($0)].compactMap { $0 }
        }
        if !notes.isEmpty { output += "\n" + notes.map { $0 + "\n" }.joined() }
        return output
    }

    /// `alice: the login ends in 2d 3h; reauthenticate within 2 days`, for a credential whose
    /// login has an absolute end (`max_session_age`, a HAT PDA's 30 days) that is still ahead.
    /// The count is rounded down, so following it is always in time.
    /// - Parameters:
    ///   - status: the credential.
    ///   - now: the current time, in seconds since the epoch.
    public static func sessionNote(_ status: CredentialStatus, now: Int64) -> String? {
        guard let end = status.sessionEndsAt, status.state != "reauthentication_required" else { return nil }
        let (remaining, overflow) = end.subtractingReportingOverflow(now)
        guard !overflow, remaining > 0 else { return nil }
        let days = remaining / 86_400
        let within = days >= 2 ? "\(days) days" : days == 1 ? "1 day" : DurationText.format(seconds: remaining)
        return
            "\(clean(status.userIdentifier)): the login ends in \(DurationText.format(seconds: remaining)); reauthenticate within \(within)"
    }

    /// `alice: its tokens live 3s, no longer than the provider's refresh_margin; each is refreshed
    /// at about two thirds of its lifetime`, for a credential whose tokens are that short-lived.
    /// - Parameter status: the credential.
    public static func lifetimeNote(_ status: CredentialStatus) -> String? {
        guard status.shorterThanMargin == true else { return nil }
        let (lifetime, overflow) = status.expiresAt.subtractingReportingOverflow(status.issuedAt)
        let shown = overflow || lifetime < 0 ? "?" : DurationText.format(seconds: lifetime)
        return "\(clean(status.userIdentifier)): its tokens live \(shown), no longer than the provider's refresh_margin; "
            + "each is refreshed at about two thirds of its lifetime"
    }

    /// `tokend 0.3.1, up 2d 4h; 3 credentials: 2 valid, 1 retrying; next refresh in 4m 10s`.
    /// - Parameters:
    ///   - daemon: the daemon's status.
    ///   - now: the current time, in seconds since the epoch.
    public static func header(_ daemon: DaemonStatus, now: Int64) -> String {
        var text = "tokend \(clean(daemon.version)), up \(DurationText.format(seconds: max(0, now - daemon.startedAt)))"
        text += "; \(daemon.credentials) credential\(daemon.credentials == 1 ? "" : "s")"
        let counts: [(Int64, String)] = [
            (daemon.valid, "valid"), (daemon.refreshing, "refreshing"), (daemon.retrying, "retrying"),
            (daemon.reauthenticationRequired, "reauthentication required"), (daemon.expired, "expired"),
        ]
        let nonZero = counts.filter { $0.0 > 0 }.map { "\($0.0) \($0.1)" }
        if !nonZero.isEmpty { text += ": " + nonZero.joined(separator: ", ") }
        if let next = daemon.nextRefreshAt {
            let until = DurationText.until(next, now: now)
            text += until == "due" ? "; next refresh due now" : "; next refresh in \(until)"
        }
        text += storeSummary(daemon)
        return text
    }

    /// `uid 1000: 2 of 128 connections, 3 of 256 credentials, 0 of 64 calls waiting`: the
    /// caller's use of its per-uid limits (administrators: not limited by them).
    public static func usageLine(_ usage: QuotaUsage) -> String {
        if usage.administrator {
            let connections = usage.connections == 1 ? "1 connection" : "\(usage.connections) connections"
            let credentials = usage.credentials == 1 ? "1 credential" : "\(usage.credentials) credentials"
            return "uid \(usage.uid) (administrator, not limited per uid): \(connections), \(credentials)"
        }
        return
            "uid \(usage.uid): \(usage.connections) of \(usage.maxConnections) connections, \(usage.credentials) of \(usage.maxCredentials) credentials, "
            + "\(usage.callsInFlight) of \(usage.maxCallsInFlight) calls waiting"
    }

    /// `caller: uid=1000 unit=backup.service exe=/usr/bin/backup`: the program tokend saw for
    /// this caller (what `unit:` and `exe:` readers are checked against); `nil` when unknown.
    public static func callerLine(_ usage: QuotaUsage) -> String? {
        guard usage.unit != nil || usage.executable != nil else { return nil }
        return clean("caller: uid=\(usage.uid) unit=\(usage.unit ?? "-") exe=\(usage.executable ?? "-")")
    }

    /// One table row.
    static func row(_ status: CredentialStatus, now: Int64) -> [String] {
        var lastError = status.lastError.map(clean) ?? "-"
        if lastError.isEmpty { lastError = "-" }
        if lastError.count > maximumErrorLength { lastError = String(lastError.prefix(maximumErrorLength - 3)) + "..." }
        return [
            clean(status.userIdentifier), clean(status.provider), clean(status.state),
            DurationText.expiresIn(status.expiresAt, now: now), DurationText.until(status.nextRefreshAt, now: now),
            reloginCell(status, now: now), DurationText.ago(status.lastRefreshAt, now: now), String(status.refreshCount),
            lastError,
        ]
    }

    /// `RELOGIN BY`: how long until a new login is needed (`6d 23h`), `passed` once the date is
    /// behind, `-` when no such date is known.
    static func reloginCell(_ status: CredentialStatus, now: Int64) -> String {
        guard let reloginBy = status.reloginBy else { return "-" }
        let (remaining, overflow) = reloginBy.subtractingReportingOverflow(now)
        guard !overflow else { return reloginBy > now ? "never" : "passed" }
        return remaining > 0 ? DurationText.format(seconds: remaining) : "passed"
    }

    /// Left-aligned columns two spaces apart; the last column is not padded.
    static func table(_ rows: [[String]]) -> String {
        guard let width = rows.map(\.count).max(), width > 0 else { return "" }
        var widths = Array(repeating: 0, count: width)
        for row in rows {
            for (index, cell) in row.enumerated() { widths[index] = max(widths[index], cell.count) }
        }
        var output = ""
        for row in rows {
            var line = ""
            for (index, cell) in row.enumerated() {
                if index == row.count - 1 {
                    line += cell
                } else {
                    line += cell + String(repeating: " ", count: widths[index] - cell.count + 2)
                }
            }
            // Trailing spaces would only come from an empty last cell.
            while line.last == " " { line.removeLast() }
            output += line + "\n"
        }
        return output
    }

    /// The status as one line of JSON: `{"daemon":{…},"credentials":[…]}` (no `daemon` when the
    /// daemon sent none). The fields are those of the Varlink interface.
    public static func json(daemon: DaemonStatus?, credentials: [CredentialStatus]) -> String {
        var object: JSONObject = [:]
        object.setIfPresent("daemon", daemon.map { .object($0.json) })
        object["credentials"] = .array(credentials.map { .object($0.json) })
        return JSONWriter.string(.object(object))
    }

    /// `text` as it may be shown on a terminal (what the daemon sends, control characters replaced).
    public static func clean(_ text: String) -> String {
        Redaction.display(text, secrets: [])
    }
}

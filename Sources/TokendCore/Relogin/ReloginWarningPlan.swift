/// One warning threshold of a provider's `relogin_warning`: how long before the re-login date it
/// is said, and the text it was written as (`"7d"`), which the warning repeats.
public struct ReloginThreshold: Sendable, Hashable, CustomStringConvertible {
    public var lead: Duration
    public var label: String

    public init(lead: Duration, label: String) { (self.lead, self.label) = (lead, label) }

    /// Parses `"7d"`, `"1h"`, … (``DurationFormat``); a lead of zero or less is refused.
    public init(parsing text: String) throws(DurationFormat.ParseError) {
        let lead = try DurationFormat.parse(text)
        guard lead > .zero else { throw DurationFormat.ParseError(input: text) }
        self.init(lead: lead, label: text)
    }

    /// The default `relogin_warning`: a week, a day and an hour ahead.
    public static let defaults: [ReloginThreshold] = [
        ReloginThreshold(lead: .seconds(7 * 86_400), label: "7d"), ReloginThreshold(lead: .seconds(86_400), label: "1d"),
        ReloginThreshold(lead: .seconds(3600), label: "1h"),
    ]

    public var description: String { label }
}

/// Which warnings of one credential have been said, for which re-login date. Stored with the
/// credential, so a restart neither repeats nor skips one, and every node of a shared store
/// agrees. A new date (a new login) starts a new record.
public struct ReloginWarningRecord: Sendable, Hashable {
    /// The re-login date the warnings were said for, in whole seconds (as they are shown).
    public var reloginBy: Int64
    /// The leads of the thresholds said (or passed over) for that date, in milliseconds.
    public var said: Set<Int64>

    public init(reloginBy: Int64, said: Set<Int64>) { (self.reloginBy, self.said) = (reloginBy, said) }

    /// `"<reloginBy>:<lead>,<lead>"`, the stored form.
    public var encoded: String { "\(reloginBy):" + said.sorted().map(String.init).joined(separator: ",") }

    /// Reads ``encoded``; nil for anything else (an unreadable record is an empty one: at worst
    /// the latest passed warning is said once more).
    public init?(encoded text: String) {
        let parts = text.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false)
        guard parts.count == 2, let reloginBy = Int64(parts[0]) else { return nil }
        var said: Set<Int64> = []
        for lead in parts[1].split(separator: ",") {
            guard let value = Int64(lead) else { return nil }
            said.insert(value)
        }
        self.init(reloginBy: reloginBy, said: said)
    }
}

/// What to do about one credential's re-login warnings now.
public struct ReloginWarningPlan: Sendable, Hashable {
    /// The warning to say now, if any: the latest threshold that has passed and was not said.
    public var say: ReloginThreshold?
    /// The record to store when it differs from the one given (``changed``).
    public var record: ReloginWarningRecord
    /// Whether ``record`` must be stored: there is a warning to say.
    public var changed: Bool
    /// When the next threshold passes; nil when none is left.
    public var wakeAt: Timestamp?
    /// The warning in force now: the latest threshold passed since the date was known, while
    /// the date is ahead (what a watcher that connects now is told).
    public var inForce: ReloginThreshold?

    public init(
        say: ReloginThreshold?, record: ReloginWarningRecord, changed: Bool, wakeAt: Timestamp?, inForce: ReloginThreshold? = nil
    ) {
        (self.say, self.record, self.changed, self.wakeAt, self.inForce) = (say, record, changed, wakeAt, inForce)
    }

    /// Decides which warning to say now.
    ///
    /// A threshold passes at `deadline - lead`. Thresholds that had passed before the deadline
    /// was known are never said. Of those passed since and not yet said, only the latest (the
    /// shortest lead) is said, once; the others are recorded as passed over, so a downtime across
    /// several thresholds gives one warning at start-up. Nothing is said at or after the deadline.
    /// - Parameters:
    ///   - deadline: the credential's re-login date.
    ///   - thresholds: the provider's `relogin_warning`, in any order.
    ///   - record: what was said so far (for any date; one for another date counts as empty).
    ///   - now: the current time.
    public static func decide(
        deadline: ReloginDeadline, thresholds: [ReloginThreshold], record: ReloginWarningRecord?, now: Timestamp
    ) -> ReloginWarningPlan {
        let reloginBy = deadline.at.secondsSince1970
        let current = record.flatMap { $0.reloginBy == reloginBy ? $0 : nil } ?? ReloginWarningRecord(reloginBy: reloginBy, said: [])
        var next = current
        guard now < deadline.at else {
            return ReloginWarningPlan(say: nil, record: current, changed: false, wakeAt: nil)
        }
        var say: ReloginThreshold?
        var inForce: ReloginThreshold?
        var wakeAt: Timestamp?
        for threshold in thresholds.sorted(by: { $0.lead > $1.lead }) {
            let passesAt = deadline.at - threshold.lead
            let key = threshold.lead.milliseconds
            if passesAt > now {
                wakeAt = min(wakeAt ?? passesAt, passesAt)
            } else if passesAt >= deadline.knownSince {
                // Sorted longest lead first: the last one assigned is the latest passed.
                inForce = threshold
                if !current.said.contains(key) { say = threshold }
                next.said.insert(key)
            } else {
                next.said.insert(key)
            }
        }
        // A longer threshold passed over after a shorter one was said is not said late.
        if let said = say, current.said.contains(where: { $0 < said.lead.milliseconds }) { say = nil }
        // Only the latest passed threshold is said; one passed earlier and said already is not.
        if let said = say, said != inForce { say = nil }
        return ReloginWarningPlan(
            // Stored only with a warning to say: thresholds passed over are passed over again
            // by the same decision, so recording them alone would be a write for nothing.
            say: say, record: next, changed: say != nil, wakeAt: wakeAt, inForce: inForce)
    }
}

/// The refresh loop's two timetables: when each credential is next due (a refresh, a retry or
/// the end of its login) and when to warn that a login ends soon.
///
/// Pure bookkeeping: the daemon's loop asks what is due, sleeps until ``nextEvent``, and is
/// woken when a plan comes earlier than its sleep.
public struct RefreshScheduler: Sendable {
    private var refreshes = RefreshSchedule()
    private var warnings = RefreshSchedule()

    public init() {}

    /// Credentials with an event planned.
    public var count: Int { refreshes.count }

    /// When `user`'s next event is due, if one is planned.
    public func dueTime(of user: String) -> Timestamp? { refreshes.dueTime(of: user) }

    /// The earliest event of either timetable.
    public var nextEvent: Timestamp? {
        mutating get { [refreshes.nextDue, warnings.nextDue].compactMap { $0 }.min() }
    }

    /// Replaces `user`'s plan with `events`.
    ///
    /// - Parameter awaitingGrant: a grant in flight marked the credential `refreshing`; its
    ///   outcome plans the next event. Planned from the old times it would be due at once, and
    ///   every grant of a refresh storm would wake the loop only to join itself.
    /// - Returns: the due time now planned, so the loop can wake if it sleeps past it.
    @discardableResult
    public mutating func replan(_ user: String, with events: PlannedEvents, awaitingGrant: Bool = false) -> Timestamp? {
        cancel(user)
        if let warnAt = events.warnAt { warnings.schedule(user, at: warnAt) }
        guard let due = events.due, !awaitingGrant else { return nil }
        refreshes.schedule(user, at: due)
        return due
    }

    /// Plans `user`'s next event at `due` whatever its times say (a retry).
    public mutating func retry(_ user: String, at due: Timestamp) {
        refreshes.schedule(user, at: due)
    }

    /// Drops everything planned for `user` (removed, or reauthentication required).
    public mutating func cancel(_ user: String) {
        refreshes.cancel(user)
        warnings.cancel(user)
    }

    /// Plans many credentials at once (start-up).
    public mutating func load(
        due: [(userIdentifier: String, due: Timestamp)], warnings warn: [(userIdentifier: String, due: Timestamp)]
    ) {
        refreshes.schedule(contentsOf: due)
        warnings.schedule(contentsOf: warn)
    }

    /// Removes and returns the credentials whose event is due, earliest first, at most `limit`.
    public mutating func popDue(now: Timestamp, limit: Int = .max) -> [String] {
        refreshes.popDue(now: now, limit: limit)
    }

    /// Removes and returns the credentials whose session-end warning is due.
    public mutating func popWarnings(now: Timestamp) -> [String] {
        warnings.popDue(now: now)
    }
}

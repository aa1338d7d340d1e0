/// The times of a credential its refresh plan depends on.
public struct CredentialTimes: Sendable, Hashable {
    public var issuedAt: Timestamp
    public var expiresAt: Timestamp
    public var sessionStartedAt: Timestamp

    public init(issuedAt: Timestamp, expiresAt: Timestamp, sessionStartedAt: Timestamp) {
        (self.issuedAt, self.expiresAt, self.sessionStartedAt) = (issuedAt, expiresAt, sessionStartedAt)
    }

    public init(of credential: Credential) {
        self.init(issuedAt: credential.issuedAt, expiresAt: credential.expiresAt, sessionStartedAt: credential.sessionStartedAt)
    }
}

/// What the scheduler does next for one credential.
public struct PlannedEvents: Sendable, Hashable {
    /// The next event: a proactive refresh, a retry after a failure, or the login's end when
    /// that comes first. Nil when nothing will happen (reauthentication required, or nothing
    /// can renew the token: it is served until its deadline).
    public var due: Timestamp?
    /// When to warn that the login ends soon.
    public var warnAt: Timestamp?
    /// The refresh plan of the current token (nil once reauthentication is required).
    public var plan: RefreshPlan?

    public init(due: Timestamp?, warnAt: Timestamp?, plan: RefreshPlan?) {
        (self.due, self.warnAt, self.plan) = (due, warnAt, plan)
    }
}

extension RefreshPolicy {
    /// When the login of a credential with these times ends for good, if the provider sets an
    /// end (``sessionEnd(of:)`` from the times alone).
    public func sessionEnd(of times: CredentialTimes) -> Timestamp? {
        let end = maxSessionAge.map { times.sessionStartedAt + $0 }
        guard expiryEndsSession else { return end }
        return min(end ?? times.expiresAt, times.expiresAt)
    }

    /// The next event and the session-end warning of one credential.
    ///
    /// - Parameters:
    ///   - renewable: something can renew the token: it has a refresh token, or the provider
    ///     renews without one (exec, HAT).
    ///   - jitter: a value in 0...1 that spreads proactive refreshes out.
    public func events(status: RefreshStatus, renewable: Bool, times: CredentialTimes, jitter: Double, now: Timestamp) -> PlannedEvents {
        guard status.state != .reauthenticationRequired else { return PlannedEvents(due: nil, warnAt: nil, plan: nil) }
        let deadline = deadline(expiresAt: times.expiresAt, issuedAt: times.issuedAt, sessionStartedAt: times.sessionStartedAt)
        let sessionEnd = sessionEnd(of: times)
        var warnAt: Timestamp?
        if let sessionEnd {
            let lead = sessionEnd - sessionWarningLead
            if lead > now { warnAt = lead } else if sessionEnd > now { warnAt = now }
        }
        let plan = plan(issuedAt: times.issuedAt, deadline: deadline, lastGrantAt: status.lastRefreshAt, jitter: jitter)
        let due: Timestamp?
        if status.state == .retrying, let retryAt = status.retryAt {
            due = retryAt
        } else if let sessionEnd, deadline >= sessionEnd {
            // Refreshing cannot outlive the login: the next event is its end.
            due = sessionEnd
        } else if renewable {
            due = plan.refreshAt
        } else {
            due = nil
        }
        return PlannedEvents(due: due, warnAt: warnAt, plan: plan)
    }
}

import Testing

@testable import TokendCore

/// What the scheduler plans for one credential: refresh, retry, the login's end, or nothing.
struct PlannedEventsTests {
    let start = Timestamp(secondsSince1970: 1_700_000_000)

    func times(lifetime: Duration, sessionAge: Duration = .zero) -> CredentialTimes {
        CredentialTimes(issuedAt: start, expiresAt: start + lifetime, sessionStartedAt: start - sessionAge)
    }

    @Test func aRenewableTokenIsRefreshedAtItsRefreshPoint() {
        let policy = RefreshPolicy(jitterFraction: 0)
        let events = policy.events(status: RefreshStatus(), renewable: true, times: times(lifetime: .seconds(3600)), jitter: 0, now: start)
        #expect(events.due == start + .seconds(2880))
        #expect(events.plan?.refreshAt == events.due)
        #expect(events.warnAt == nil)
    }

    @Test func aTokenNothingCanRenewIsServedUntilItsDeadline() {
        let events = RefreshPolicy().events(
            status: RefreshStatus(), renewable: false, times: times(lifetime: .seconds(3600)), jitter: 0.5, now: start)
        #expect(events.due == nil)
        #expect(events.plan != nil)
    }

    @Test func aRetryComesAtItsRetryTime() {
        let retryAt = start + .seconds(7)
        let events = RefreshPolicy().events(
            status: RefreshStatus(state: .retrying, retryAt: retryAt), renewable: true, times: times(lifetime: .seconds(3600)),
            jitter: 0, now: start)
        #expect(events.due == retryAt)
    }

    @Test func reauthenticationRequiredPlansNothing() {
        let events = RefreshPolicy(maxSessionAge: .seconds(100)).events(
            status: RefreshStatus(state: .reauthenticationRequired), renewable: true, times: times(lifetime: .seconds(60)), jitter: 0,
            now: start)
        #expect(events == PlannedEvents(due: nil, warnAt: nil, plan: nil))
    }

    /// A token whose deadline reaches the login's absolute end is not refreshed: the next
    /// event is the end itself, warned about `sessionWarningLead` before.
    @Test func theLoginsEndComesFirst() {
        let policy = RefreshPolicy(maxSessionAge: .seconds(3600), sessionWarningLead: .seconds(600))
        let events = policy.events(
            status: RefreshStatus(), renewable: true, times: times(lifetime: .seconds(7200), sessionAge: .seconds(1800)), jitter: 0,
            now: start)
        #expect(events.due == start + .seconds(1800))
        #expect(events.warnAt == start + .seconds(1200))
    }

    @Test func aWarningDueAlreadyIsGivenNow() {
        let policy = RefreshPolicy(maxSessionAge: .seconds(3600), sessionWarningLead: .seconds(600))
        let events = policy.events(
            status: RefreshStatus(), renewable: true, times: times(lifetime: .seconds(60), sessionAge: .seconds(3300)), jitter: 0,
            now: start)
        #expect(events.warnAt == start)
    }

    @Test func anExpiryThatEndsTheSessionIsTheEnd() {
        var policy = RefreshPolicy()
        policy.expiryEndsSession = true
        let events = policy.events(status: RefreshStatus(), renewable: true, times: times(lifetime: .seconds(60)), jitter: 0, now: start)
        #expect(events.due == start + .seconds(60))
        #expect(policy.sessionEnd(of: times(lifetime: .seconds(60))) == start + .seconds(60))
    }
}

import Testing

@testable import TokendCore

struct RefreshSchedulerTests {
    let t0 = Timestamp(secondsSince1970: 1_700_000_000)

    func events(due: Int?, warn: Int? = nil) -> PlannedEvents {
        PlannedEvents(due: due.map { t0 + .seconds($0) }, warnAt: warn.map { t0 + .seconds($0) }, plan: nil)
    }

    @Test func replanningReplacesTheOldPlan() {
        var scheduler = RefreshScheduler()
        #expect(scheduler.replan("alice", with: events(due: 100, warn: 50)) == t0 + .seconds(100))
        #expect(scheduler.replan("alice", with: events(due: 30)) == t0 + .seconds(30))
        #expect(scheduler.nextEvent == t0 + .seconds(30))
        #expect(scheduler.popWarnings(now: t0 + .seconds(60)).isEmpty)
        #expect(scheduler.popDue(now: t0 + .seconds(200)) == ["alice"])
        #expect(scheduler.nextEvent == nil)
    }

    /// A credential whose grant is in flight is planned by the grant's outcome: it keeps its
    /// warning but gets no refresh event of its own.
    @Test func aCredentialAwaitingItsGrantIsNotDue() {
        var scheduler = RefreshScheduler()
        #expect(scheduler.replan("alice", with: events(due: 0, warn: 10), awaitingGrant: true) == nil)
        #expect(scheduler.popDue(now: t0 + .seconds(5)).isEmpty)
        #expect(scheduler.nextEvent == t0 + .seconds(10))
        #expect(scheduler.popWarnings(now: t0 + .seconds(10)) == ["alice"])
    }

    @Test func cancellingDropsBothEvents() {
        var scheduler = RefreshScheduler()
        scheduler.replan("alice", with: events(due: 100, warn: 50))
        scheduler.cancel("alice")
        #expect(scheduler.nextEvent == nil)
        #expect(scheduler.count == 0)
    }

    @Test func aRetryOverridesThePlan() {
        var scheduler = RefreshScheduler()
        scheduler.replan("alice", with: events(due: 100))
        scheduler.retry("alice", at: t0 + .seconds(3))
        #expect(scheduler.dueTime(of: "alice") == t0 + .seconds(3))
        #expect(scheduler.popDue(now: t0 + .seconds(3)) == ["alice"])
    }

    @Test func startUpLoadsInBulkAndPopsInOrderWithinTheLimit() {
        var scheduler = RefreshScheduler()
        let due = (0..<10).map { (userIdentifier: "u\($0)", due: t0 + .seconds(Int64(10 - $0))) }
        scheduler.load(due: due, warnings: [(userIdentifier: "u0", due: t0)])
        #expect(scheduler.count == 10)
        #expect(scheduler.popWarnings(now: t0) == ["u0"])
        #expect(scheduler.popDue(now: t0 + .seconds(10), limit: 3) == ["u9", "u8", "u7"])
        #expect(scheduler.popDue(now: t0 + .seconds(10)).count == 7)
    }
}

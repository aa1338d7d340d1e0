import Testing
import TokendTestSupport

@testable import TokendCore

/// The planning rules, case by case.
struct RefreshPlanRuleTests {
    let start = ts(1_000_000)

    private func policy(margin: Int64 = 10, at fraction: Double = 0.8, jitter: Double = 0.05) -> RefreshPolicy {
        RefreshPolicy(refreshAtFraction: fraction, minimumMargin: .seconds(margin), jitterFraction: jitter)
    }

    @Test func aThreeSecondTokenUnderATenSecondMarginIsRefreshedAtTwoSeconds() {
        let plan = policy().plan(issuedAt: start, deadline: start + .seconds(3), lastGrantAt: start, jitter: 0)
        #expect(plan.refreshAt == start + .seconds(2))
        #expect(plan.margin == .seconds(1))
        #expect(plan.shorterThanMargin)
        #expect(plan.lifetime == .seconds(3))
    }

    @Test func aLongTokenKeepsTheConfiguredMargin() {
        let plan = policy().plan(issuedAt: start, deadline: start + .seconds(3600), lastGrantAt: start, jitter: 0)
        #expect(plan.margin == .seconds(10))
        #expect(plan.refreshAt == start + .seconds(2880))
        #expect(!plan.shorterThanMargin)
    }

    @Test func aMarginAsLongAsTheTokenIsShortened() {
        // refresh_margin = 5m with 5-minute tokens: refreshed at two thirds, not at once.
        let plan = policy(margin: 300).plan(issuedAt: start, deadline: start + .seconds(300), lastGrantAt: start, jitter: 0)
        #expect(plan.refreshAt == start + .seconds(200))
        #expect(plan.shorterThanMargin)
    }

    @Test func aTokenNoFresherThanTheLastGrantDoesNotBringTheNextForward() {
        // The last grant (at +50 min) brought back a token issued an hour ago that expires in
        // ten minutes: without the spacing rule its refresh point would be now.
        let issued = start
        let grant = start + .seconds(3000)
        let plan = policy().plan(issuedAt: issued, deadline: issued + .seconds(3600), lastGrantAt: grant, jitter: 0)
        #expect(plan.refreshAt == grant + .seconds(1800))
    }

    @Test func anEmptyLifetimeIsStillSpacedFromTheLastGrant() {
        let plan = policy().plan(issuedAt: start, deadline: start, lastGrantAt: start, jitter: 0.3)
        #expect(plan.lifetime == .zero)
        #expect(plan.refreshAt == start + RefreshPolicy.minimumSpacing)
        let negative = policy().plan(issuedAt: start, deadline: start - .seconds(60), lastGrantAt: start, jitter: 0)
        #expect(negative.lifetime == .zero)
        #expect(negative.refreshAt == start + RefreshPolicy.minimumSpacing)
    }

    @Test func withoutALastGrantOnlyTheTokenCounts() {
        let plan = policy().plan(issuedAt: start, deadline: start + .seconds(1000), lastGrantAt: nil, jitter: 1)
        #expect(plan.refreshAt == start + .seconds(750))
        #expect(policy().refreshPoint(of: makeCredential(issuedAt: start, expiresAt: start + .seconds(1000)), jitter: 1) == plan.refreshAt)
    }

    @Test func aStoredCredentialIsPlannedFromItsStatus() {
        var credential = makeCredential(issuedAt: start, expiresAt: start + .seconds(3600))
        credential.status.lastRefreshAt = start + .seconds(3500)
        let plan = policy().plan(of: credential, jitter: 0)
        #expect(plan.refreshAt == start + .seconds(3500 + 1800))
    }

    @Test func hugeLifetimesSaturate() {
        let plan = RefreshPolicy(maxTokenAge: .seconds(Int64.max)).plan(
            issuedAt: start, deadline: Timestamp(millisecondsSince1970: .max), lastGrantAt: start, jitter: 0.5)
        #expect(plan.refreshAt > start)
        #expect(plan.refreshAt < Timestamp(millisecondsSince1970: .max))
    }
}

/// Grants a credential gets from a provider whose tokens live `lifetime`, simulated against the
/// planner: every lifetime from 1 s to 90 days, under every margin, `refresh_at` and jitter.
struct RefreshPlanPropertyTests {
    static let lifetimes: [Int64] = [1, 2, 3, 5, 8, 10, 15, 30, 60, 300, 3600, 86_400, 30 * 86_400, 90 * 86_400]
    static let margins: [Int64] = [1, 10, 60, 300, 3600]
    static let fractions = [0.05, 0.5, 0.8, 0.95]
    static let jitterFractions = [0.0, 0.05, 0.2]

    struct Run {
        var grants = 0
        var lifetimes = 0.0
        var lateRefreshes = 0
        var tooClose = 0
    }

    /// Runs `rounds` proactive grants; each new token is issued when its grant runs. A clock
    /// step of `step` (forward or back) happens before grant `stepAt`.
    static func simulate(
        policy: RefreshPolicy, lifetime: Duration, rounds: Int, step: Duration = .zero, stepAt: Int = -1,
        using generator: inout SeededGenerator
    ) -> Run {
        var run = Run()
        var clock = ts(1_700_000_000)
        var issued = clock
        // The first token came from a grant too (a login, or a refresh before tokend was asked).
        var lastGrant: Timestamp? = clock
        let firstIssue = clock
        var skipped: Duration = .zero
        for round in 0..<rounds {
            let deadline = policy.deadline(expiresAt: issued + lifetime, issuedAt: issued, sessionStartedAt: firstIssue)
            let plan = policy.plan(
                issuedAt: issued, deadline: deadline, lastGrantAt: lastGrant, jitter: Double.random(in: 0...1, using: &generator))
            if plan.refreshAt >= deadline { run.lateRefreshes += 1 }
            if let lastGrant,
                plan.refreshAt - lastGrant < max(RefreshPolicy.minimumSpacing, plan.lifetime * RefreshPolicy.minimumSpacingFraction)
            {
                run.tooClose += 1
            }
            if round == stepAt {
                clock = clock + step
                skipped = skipped + step
            }
            // The scheduler runs the grant when it is due by the (possibly stepped) clock.
            clock = max(clock, plan.refreshAt)
            lastGrant = clock
            issued = clock
            run.grants += 1
        }
        let elapsed = (clock - firstIssue) - max(skipped, .zero)
        let effective = policy.deadline(expiresAt: firstIssue + lifetime, issuedAt: firstIssue, sessionStartedAt: firstIssue) - firstIssue
        run.lifetimes = Double(elapsed.milliseconds) / Double(effective.milliseconds)
        return run
    }

    @Test(arguments: lifetimes)
    func grantsPerLifetimeStayBetweenOneAndTwo(lifetimeSeconds: Int64) {
        var generator = SeededGenerator(seed: UInt64(lifetimeSeconds))
        for margin in Self.margins {
            for fraction in Self.fractions {
                for jitterFraction in Self.jitterFractions {
                    let policy = RefreshPolicy(refreshAtFraction: fraction, minimumMargin: .seconds(margin), jitterFraction: jitterFraction)
                    let run = Self.simulate(policy: policy, lifetime: .seconds(lifetimeSeconds), rounds: 40, using: &generator)
                    let perLifetime = Double(run.grants) / run.lifetimes
                    let label = "lifetime \(lifetimeSeconds)s margin \(margin)s refresh_at \(fraction) jitter \(jitterFraction)"
                    #expect(perLifetime >= 1 && perLifetime <= 2.0001, "\(perLifetime) grants per lifetime: \(label)")
                    #expect(run.lateRefreshes == 0, "refresh planned at or after the deadline: \(label)")
                    #expect(run.tooClose == 0, "grants closer than half a lifetime: \(label)")
                }
            }
        }
    }

    static let clockSteps: [Int64] = [-86_400 * 10, -3600, -30, -1, 1, 30, 3600, 86_400 * 10]

    @Test(arguments: clockSteps)
    func aClockStepCausesAtMostOneExtraGrant(stepSeconds: Int64) {
        var generator = SeededGenerator(seed: UInt64(bitPattern: stepSeconds))
        for lifetime in Self.lifetimes {
            let policy = RefreshPolicy()
            let steady = Self.simulate(policy: policy, lifetime: .seconds(lifetime), rounds: 30, using: &generator)
            let stepped = Self.simulate(
                policy: policy, lifetime: .seconds(lifetime), rounds: 30, step: .seconds(stepSeconds), stepAt: 10, using: &generator)
            #expect(stepped.lateRefreshes == 0 && stepped.tooClose == 0, "lifetime \(lifetime)s, step \(stepSeconds)s")
            // The same number of grants covers at least the same span, less one grant's worth.
            let perLifetime = Double(stepped.grants - 1) / stepped.lifetimes
            #expect(
                perLifetime <= 2.0001,
                "lifetime \(lifetime)s, step \(stepSeconds)s: \(perLifetime) grants per lifetime (steady \(Double(steady.grants) / steady.lifetimes))"
            )
        }
    }

    @Test func randomPoliciesAndTokensNeverPlanAtOrAfterTheDeadline() {
        var generator = SeededGenerator(seed: 18)
        for _ in 0..<2000 {
            let lifetime = Int64.random(in: 1...(90 * 86_400), using: &generator)
            let policy = RefreshPolicy(
                maxTokenAge: .seconds(Int64.random(in: 1...(60 * 86_400), using: &generator)),
                refreshAtFraction: Double.random(in: 0.01...0.99, using: &generator),
                minimumMargin: .seconds(Int64.random(in: 1...7200, using: &generator)),
                jitterFraction: Double.random(in: 0...0.5, using: &generator)
            )
            let issued = ts(Int64.random(in: 0...2_000_000_000, using: &generator))
            let deadline = policy.deadline(expiresAt: issued + .seconds(lifetime), issuedAt: issued, sessionStartedAt: issued)
            let plan = policy.plan(
                issuedAt: issued, deadline: deadline, lastGrantAt: issued, jitter: Double.random(in: 0...1, using: &generator))
            #expect(plan.refreshAt < deadline)
            #expect(plan.refreshAt >= issued + plan.lifetime / 2)
            #expect(plan.margin <= policy.minimumMargin && plan.margin <= plan.lifetime / 3 + .milliseconds(1))
        }
    }
}

struct GrantFreshnessTests {
    let policy = RefreshPolicy()
    let received = ts(1_000_100)

    @Test func aLaterDeadlineIsFresher() {
        let old = makeCredential(issuedAt: ts(1_000_000), expiresAt: ts(1_000_120))
        let new = makeCredential(issuedAt: received, expiresAt: ts(1_000_220))
        #expect(policy.freshness(of: new, replacing: old, receivedAt: received) == .fresher)
    }

    @Test func theSameOrAnEarlierDeadlineIsNoFresher() {
        let old = makeCredential(issuedAt: ts(1_000_000), expiresAt: ts(1_000_120))
        #expect(policy.freshness(of: old, replacing: old, receivedAt: received) == .noFresher(deadline: ts(1_000_120)))
        let earlier = makeCredential(issuedAt: ts(1_000_000), expiresAt: ts(1_000_110))
        #expect(policy.freshness(of: earlier, replacing: old, receivedAt: received) == .noFresher(deadline: ts(1_000_110)))
    }

    @Test func aTokenPastItsDeadlineOnArrivalIsExpired() {
        let old = makeCredential(issuedAt: ts(1_000_000), expiresAt: ts(1_000_120))
        let expired = makeCredential(issuedAt: ts(999_000), expiresAt: ts(1_000_100))
        #expect(policy.freshness(of: expired, replacing: old, receivedAt: received) == .expiredOnArrival)
    }
}

struct CallerRefreshRuleTests {
    let now = ts(1_000_000)
    let interval = Duration.seconds(30)

    private func decide(
        valid: Bool, rejected: Bool = false, lastRefresh: Int64? = nil, lastForced: Int64? = nil, retryAt: Int64? = nil
    ) -> CallerRefreshRule {
        CallerRefreshRule.decide(
            tokenValid: valid, rejectedByAPI: rejected, lastRefreshAt: lastRefresh.map { now + .seconds($0) },
            lastForcedAt: lastForced.map { now + .seconds($0) }, retryAt: retryAt.map { now + .seconds($0) }, interval: interval, now: now
        )
    }

    @Test func aValidTokenIsRefreshedOncePerInterval() {
        #expect(decide(valid: true) == .refresh)
        #expect(decide(valid: true, lastRefresh: -31) == .refresh)
        #expect(decide(valid: true, lastRefresh: -5) == .serveCurrent)
        #expect(decide(valid: true, lastForced: -5) == .serveCurrent)
        #expect(decide(valid: true, rejected: true, lastRefresh: -5) == .refuseRecentlyRefreshed(nextAllowed: now + .seconds(25)))
    }

    @Test func anExpiredTokenIsAlwaysRefreshedForACaller() {
        // The fleet's failure: a token refreshed 19 s ago that has expired since.
        #expect(decide(valid: false, lastRefresh: -19) == .refresh)
        #expect(decide(valid: false, rejected: true, lastRefresh: -1, lastForced: -1) == .refresh)
        #expect(decide(valid: false, lastRefresh: -1, retryAt: -1) == .refresh)
    }

    @Test func anExpiredTokenWhoseRefreshIsFailingIsTriedOncePerInterval() {
        #expect(decide(valid: false, retryAt: 100) == .refresh)
        #expect(decide(valid: false, lastForced: -40, retryAt: 100) == .refresh)
        #expect(decide(valid: false, lastForced: -10, retryAt: 100) == .refuseFailing(retryAt: now + .seconds(20)))
        #expect(decide(valid: false, lastForced: -10, retryAt: 5) == .refuseFailing(retryAt: now + .seconds(5)))
    }
}

import Testing
import TokendTestSupport

@testable import TokendCore

func ts(_ seconds: Int64) -> Timestamp { Timestamp(secondsSince1970: seconds) }

func makeCredential(
    issuedAt: Timestamp = ts(1_000_000),
    expiresAt: Timestamp = ts(1_003_600),
    sessionStartedAt: Timestamp? = nil,
    readers: [Reader] = [.uid(1000)],
    accessToken: String = "access-token-value"
) -> Credential {
    Credential(
        userIdentifier: "alice", provider: "example", accessToken: SecretString(accessToken),
        refreshToken: SecretString("refresh-token-value"), tokenType: "Bearer", scope: "read",
        expiresAt: expiresAt, issuedAt: issuedAt, sessionStartedAt: sessionStartedAt ?? issuedAt,
        readers: readers, enrolment: Enrolment(uid: 1000, pid: 42, at: issuedAt)
    )
}

struct RefreshPolicyDeadlineTests {
    let iat = ts(1_000_000)

    @Test func expIsTheMinimum() {
        let policy = RefreshPolicy(maxTokenAge: .seconds(7200), maxSessionAge: .seconds(86400))
        let deadline = policy.deadline(expiresAt: ts(1_003_600), issuedAt: iat, sessionStartedAt: iat)
        #expect(deadline == ts(1_003_600))
    }

    @Test func maxTokenAgeIsTheMinimum() {
        let policy = RefreshPolicy(maxTokenAge: .seconds(600), maxSessionAge: .seconds(86400))
        let deadline = policy.deadline(expiresAt: ts(1_003_600), issuedAt: iat, sessionStartedAt: iat)
        #expect(deadline == ts(1_000_600))
    }

    @Test func maxSessionAgeIsTheMinimum() {
        // The session began long before this token; its end comes first.
        let policy = RefreshPolicy(maxTokenAge: .seconds(7200), maxSessionAge: .seconds(86400))
        let deadline = policy.deadline(expiresAt: ts(1_003_600), issuedAt: iat, sessionStartedAt: ts(1_000_000 - 86400 + 100))
        #expect(deadline == ts(1_000_100))
    }

    @Test func noSessionLimitMeansNoSessionTerm() {
        let policy = RefreshPolicy(maxTokenAge: .seconds(7200), maxSessionAge: nil)
        let deadline = policy.deadline(expiresAt: ts(1_003_600), issuedAt: iat, sessionStartedAt: ts(0))
        #expect(deadline == ts(1_003_600))
    }

    @Test func defaultMaxTokenAgeIsThirtyDays() {
        #expect(RefreshPolicy.defaultMaxTokenAge == .seconds(30 * 86400))
        let policy = RefreshPolicy()
        let deadline = policy.deadline(expiresAt: ts(1_000_000 + 365 * 86400), issuedAt: iat, sessionStartedAt: iat)
        #expect(deadline == ts(1_000_000 + 30 * 86400))
    }

    @Test func hugeAgesSaturateInsteadOfTrapping() {
        let policy = RefreshPolicy(maxTokenAge: .seconds(Int64.max), maxSessionAge: .seconds(Int64.max))
        let deadline = policy.deadline(expiresAt: ts(1_003_600), issuedAt: iat, sessionStartedAt: iat)
        #expect(deadline == ts(1_003_600))
    }

    @Test func deadlineOfCredentialUsesItsTimes() {
        let policy = RefreshPolicy(maxTokenAge: .seconds(600), maxSessionAge: .seconds(300))
        let credential = makeCredential(issuedAt: iat, expiresAt: ts(1_003_600), sessionStartedAt: ts(999_800))
        #expect(policy.deadline(of: credential) == ts(1_000_100))
        #expect(policy.sessionEnd(of: credential) == ts(1_000_100))
        #expect(RefreshPolicy().sessionEnd(of: credential) == nil)
    }
}

struct RefreshPointTests {
    let policy = RefreshPolicy(maxTokenAge: .seconds(30 * 86400), refreshAtFraction: 0.8, minimumMargin: .seconds(10), jitterFraction: 0.05)

    @Test func withoutJitterItIsTheFractionOfTheLifetime() {
        let credential = makeCredential(issuedAt: ts(1_000_000), expiresAt: ts(1_001_000))
        #expect(policy.refreshPoint(of: credential, jitter: 0) == ts(1_000_800))
    }

    @Test func fullJitterMovesItEarlierByTheJitterFraction() {
        let credential = makeCredential(issuedAt: ts(1_000_000), expiresAt: ts(1_001_000))
        // 0.8 - 0.05 = 0.75 of 1000 s.
        #expect(policy.refreshPoint(of: credential, jitter: 1) == ts(1_000_750))
    }

    @Test(arguments: [0.1, 0.25, 0.5, 0.75, 0.99])
    func jitterLowersThePoint(jitter: Double) {
        let credential = makeCredential(issuedAt: ts(1_000_000), expiresAt: ts(1_001_000))
        let withJitter = policy.refreshPoint(of: credential, jitter: jitter)
        #expect(withJitter < policy.refreshPoint(of: credential, jitter: 0))
        #expect(withJitter > policy.refreshPoint(of: credential, jitter: 1))
        let expected = Timestamp(millisecondsSince1970: 1_000_000_000 + Int64(1_000_000 * (0.8 - 0.05 * jitter)))
        #expect(withJitter == expected)
    }

    @Test(arguments: [-5.0, 2.0, 100.0])
    func jitterOutsideTheUnitIntervalIsClamped(jitter: Double) {
        let credential = makeCredential(issuedAt: ts(1_000_000), expiresAt: ts(1_001_000))
        let clamped = jitter < 0 ? 0.0 : 1.0
        #expect(policy.refreshPoint(of: credential, jitter: jitter) == policy.refreshPoint(of: credential, jitter: clamped))
    }

    @Test func neverLaterThanDeadlineMinusMargin() {
        // A 60 s token: 80 % is 48 s; a 5 s margin allows it, a 20 s margin demands 40 s.
        let credential = makeCredential(issuedAt: ts(1_000_000), expiresAt: ts(1_000_060))
        #expect(policy.refreshPoint(of: credential, jitter: 0) == ts(1_000_048))
        var wide = policy
        wide.minimumMargin = .seconds(20)
        #expect(wide.refreshPoint(of: credential, jitter: 0) == ts(1_000_040))
    }

    @Test func theMarginIsAtMostAThirdOfTheLifetime() {
        // A 20 s token under a 10 s margin: refreshed when a third of its life is left.
        let credential = makeCredential(issuedAt: ts(1_000_000), expiresAt: ts(1_000_020))
        #expect(policy.refreshPoint(of: credential, jitter: 0) == Timestamp(millisecondsSince1970: 1_000_013_334))
    }

    @Test func alreadyExpiredTokensAreDueImmediately() {
        let credential = makeCredential(issuedAt: ts(1_000_000), expiresAt: ts(999_000))
        let point = policy.refreshPoint(of: credential, jitter: 0.5)
        #expect(point == ts(999_000))
        #expect(point < credential.issuedAt)
    }

    @Test func usesTheDeadlineNotJustExp() {
        // max_token_age = 100 s cuts a one-hour token to 100 s: refresh at 80 s.
        let short = RefreshPolicy(maxTokenAge: .seconds(100), refreshAtFraction: 0.8, minimumMargin: .seconds(1), jitterFraction: 0)
        let credential = makeCredential(issuedAt: ts(1_000_000), expiresAt: ts(1_003_600))
        #expect(short.refreshPoint(of: credential, jitter: 0.7) == ts(1_000_080))
    }

    @Test func propertyNeverAfterDeadlineMinusMarginAndNeverBeforeIssue() {
        var generator = SeededGenerator(seed: 99)
        for _ in 0..<500 {
            let iat = Int64.random(in: 0...2_000_000_000, using: &generator)
            let lifetime = Int64.random(in: 1...(90 * 86400), using: &generator)
            let margin = Int64.random(in: 0...600, using: &generator)
            let policy = RefreshPolicy(
                maxTokenAge: .seconds(Int64.random(in: 1...(60 * 86400), using: &generator)),
                maxSessionAge: Bool.random(using: &generator) ? .seconds(Int64.random(in: 1...(60 * 86400), using: &generator)) : nil,
                refreshAtFraction: Double.random(in: 0.05...0.95, using: &generator),
                minimumMargin: .seconds(margin),
                jitterFraction: Double.random(in: 0...0.2, using: &generator)
            )
            let credential = makeCredential(
                issuedAt: ts(iat), expiresAt: ts(iat + lifetime),
                sessionStartedAt: ts(iat - Int64.random(in: 0...86400, using: &generator)))
            let deadline = policy.deadline(of: credential)
            let point = policy.refreshPoint(of: credential, jitter: Double.random(in: 0...1, using: &generator))
            let span = max(.zero, deadline - credential.issuedAt)
            #expect(point <= deadline - min(.seconds(margin), span / 3))
            if deadline - credential.issuedAt > .seconds(margin) * 20 {
                #expect(point >= credential.issuedAt)
            }
        }
    }
}

struct ServeDecisionTests {
    let deadline = ts(1_000_000)

    @Test func servesWhenEnoughTimeRemains() {
        #expect(ServeDecision.decide(deadline: deadline, now: ts(999_000), minimumValidity: .seconds(60)) == .serve)
        #expect(ServeDecision.decide(deadline: deadline, now: ts(999_000), minimumValidity: .zero) == .serve)
    }

    @Test func servesWhenRemainingEqualsMinimumValidity() {
        #expect(ServeDecision.decide(deadline: deadline, now: ts(999_940), minimumValidity: .seconds(60)) == .serve)
    }

    @Test func tooShortLivedReportsTheRemainingTime() {
        #expect(
            ServeDecision.decide(deadline: deadline, now: ts(999_970), minimumValidity: .seconds(60))
                == .tooShortLived(remaining: .seconds(30)))
        let oneMillisecondShort = Timestamp(millisecondsSince1970: 999_940_001)
        #expect(
            ServeDecision.decide(deadline: deadline, now: oneMillisecondShort, minimumValidity: .seconds(60))
                == .tooShortLived(remaining: .milliseconds(59_999)))
    }

    @Test func expiredAtAndAfterTheDeadline() {
        #expect(ServeDecision.decide(deadline: deadline, now: deadline, minimumValidity: .zero) == .expired)
        #expect(ServeDecision.decide(deadline: deadline, now: ts(1_000_001), minimumValidity: .zero) == .expired)
        #expect(ServeDecision.decide(deadline: deadline, now: ts(2_000_000), minimumValidity: .seconds(3600)) == .expired)
    }

    @Test func oneMillisecondBeforeTheDeadlineIsStillServable() {
        let now = Timestamp(millisecondsSince1970: deadline.millisecondsSince1970 - 1)
        #expect(ServeDecision.decide(deadline: deadline, now: now, minimumValidity: .zero) == .serve)
        #expect(
            ServeDecision.decide(deadline: deadline, now: now, minimumValidity: .milliseconds(2))
                == .tooShortLived(remaining: .milliseconds(1)))
    }
}

import Testing

@testable import TokendCore

/// The pure parts of the refresh engine: when, how often, and what a response means.
struct RefreshScheduleTests {
    static func t(_ seconds: Int64) -> Timestamp { Timestamp(secondsSince1970: seconds) }

    @Test func popsDueUsersEarliestFirstAndNothingEarly() {
        var schedule = RefreshSchedule()
        schedule.schedule("c", at: Self.t(30))
        schedule.schedule("a", at: Self.t(10))
        schedule.schedule("b", at: Self.t(20))
        #expect(schedule.nextDue == Self.t(10))
        #expect(schedule.popDue(now: Self.t(5)).isEmpty)
        #expect(schedule.popDue(now: Self.t(20)) == ["a", "b"])
        #expect(schedule.count == 1)
        #expect(schedule.nextDue == Self.t(30))
    }

    @Test func reschedulingReplacesThePlanAndCancelForgetsIt() {
        var schedule = RefreshSchedule()
        schedule.schedule("a", at: Self.t(10))
        schedule.schedule("a", at: Self.t(50))
        schedule.schedule("b", at: Self.t(20))
        schedule.cancel("b")
        #expect(schedule.popDue(now: Self.t(40)).isEmpty, "a's old time and b's cancelled one are stale")
        #expect(schedule.dueTime(of: "a") == Self.t(50))
        #expect(schedule.popDue(now: Self.t(50)) == ["a"])
        #expect(schedule.nextDue == nil)
    }

    @Test func staysCompactUnderManyReschedules() {
        var schedule = RefreshSchedule()
        for round in 0..<200 {
            for user in 0..<50 { schedule.schedule("u\(user)", at: Self.t(Int64(1000 + round * 50 + user))) }
        }
        #expect(schedule.count == 50)
        let due = schedule.popDue(now: Self.t(1_000_000))
        #expect(due.count == 50)
        #expect(Set(due).count == 50)
    }

    @Test func limitBoundsOnePop() {
        var schedule = RefreshSchedule()
        for user in 0..<10 { schedule.schedule("u\(user)", at: Self.t(Int64(user))) }
        #expect(schedule.popDue(now: Self.t(100), limit: 3) == ["u0", "u1", "u2"])
        #expect(schedule.count == 7)
    }
}

struct BackoffTests {
    @Test(arguments: [(1, 1000), (2, 2000), (3, 4000), (10, 60000), (40, 60000)])
    func growsExponentiallyUpToTheCap(attempt: Int, ceilingMilliseconds: Int64) {
        let backoff = Backoff(initial: .seconds(1), maximum: .seconds(60))
        #expect(backoff.delay(attempt: attempt, random: 1).milliseconds == ceilingMilliseconds)
        #expect(backoff.delay(attempt: attempt, random: 0).milliseconds == ceilingMilliseconds / 2, "jitter stays in the upper half")
    }

    @Test func retryAfterWinsWhenLongerButIsCapped() {
        let backoff = Backoff(initial: .seconds(1), maximum: .seconds(60))
        #expect(backoff.delay(attempt: 1, retryAfter: .seconds(30), random: 0.5) == .seconds(30))
        #expect(backoff.delay(attempt: 5, retryAfter: .milliseconds(1), random: 1) == .seconds(16))
        #expect(backoff.delay(attempt: 1, retryAfter: .seconds(99999), random: 0) == .seconds(3600))
    }
}

struct TokenBucketTests {
    static func ms(_ value: Int64) -> Timestamp { Timestamp(millisecondsSince1970: value) }

    @Test func allowsABurstThenTheRate() {
        var bucket = TokenBucket(ratePerSecond: 2, burst: 3)
        var taken = 0
        for _ in 0..<3 where bucket.tryTake(now: Self.ms(0)) { taken += 1 }
        #expect(taken == 3)
        let empty = bucket.tryTake(now: Self.ms(0))
        let tooSoon = bucket.tryTake(now: Self.ms(400))
        let refilled = bucket.tryTake(now: Self.ms(500))
        let emptyAgain = bucket.tryTake(now: Self.ms(600))
        #expect(!empty)
        #expect(!tooSoon)
        #expect(refilled, "one token back after 1/rate")
        #expect(!emptyAgain)
    }

    @Test func reservationsQueueInOrder() {
        var bucket = TokenBucket(ratePerSecond: 10, burst: 1)
        let waits = [bucket.reserve(now: Self.ms(0)), bucket.reserve(now: Self.ms(0)), bucket.reserve(now: Self.ms(0))]
        #expect(waits == [.zero, .milliseconds(100), .milliseconds(200)])
        let later = bucket.reserve(now: Self.ms(1000))
        #expect(later == .zero, "refilled after a quiet second")
    }
}

struct GrantOutcomeTests {
    static let now = Timestamp(secondsSince1970: 1_700_000_000)

    static func classify(_ status: Int, _ body: String, retryAfter: String? = nil) -> GrantOutcome {
        GrantOutcome.classify(status: status, retryAfterHeader: retryAfter, body: Array(body.utf8), now: now)
    }

    @Test func successNeedsAnAccessToken() {
        guard case .success(let response) = Self.classify(200, #"{"access_token":"abc","refresh_token":"r2","expires_in":60}"#) else {
            Issue.record("expected success")
            return
        }
        #expect(response.accessToken.value == "abc")
        #expect(response.refreshToken?.value == "r2")
        // Errors, never an empty token; of unknown outcome, since the server acted on the grant.
        guard case .unanswered(let reason) = Self.classify(200, #"{"token_type":"Bearer"}"#) else {
            Issue.record("a 200 without access_token is an error, never an empty token")
            return
        }
        #expect(reason.contains("access_token"))
        guard case .unanswered = Self.classify(200, #"{"access_token":"abc""#) else {
            Issue.record("truncated JSON is an error")
            return
        }
    }

    @Test(arguments: ["invalid_grant", "invalid_client", "unauthorized_client"])
    func permanentErrorsMeanReauthentication(code: String) {
        let outcome = Self.classify(400, #"{"error":"\#(code)","error_description":"nope"}"#)
        #expect(outcome == .permanent(error: code, description: "nope"))
    }

    @Test func throttlingAndServerErrorsAreTransientWithRetryAfter() {
        #expect(
            Self.classify(503, "<html>down</html>", retryAfter: "7")
                == .transient(reason: "the token endpoint answered 503", retryAfter: .seconds(7)))
        #expect(
            Self.classify(429, "", retryAfter: "Tue, 14 Nov 2023 22:13:40 GMT")
                == .transient(reason: "the token endpoint answered 429", retryAfter: .seconds(20)))
        #expect(Self.classify(500, "", retryAfter: "soon") == .transient(reason: "the token endpoint answered 500", retryAfter: nil))
        guard case .transient = Self.classify(400, #"{"error":"temporarily_unavailable"}"#) else {
            Issue.record("temporarily_unavailable is worth retrying")
            return
        }
        guard case .transient = Self.classify(404, "<html>not here</html>") else {
            Issue.record("an HTML error page is not a permanent OAuth error")
            return
        }
    }

    @Test func httpDatesParse() {
        #expect(HTTPDate.parse("Sun, 06 Nov 1994 08:49:37 GMT") == Timestamp(secondsSince1970: 784_111_777))
        #expect(HTTPDate.parse("Sun, 06 Nov 1994 08:49:37 PST") == nil)
        #expect(HTTPDate.parse("06 Nov 1994") == nil)
    }
}

struct CredentialRefreshTests {
    static func credential() -> Credential {
        Credential(
            userIdentifier: "alice", provider: "p", accessToken: SecretString("old"), refreshToken: SecretString("r1"),
            tokenType: "Bearer", scope: "read", expiresAt: Timestamp(secondsSince1970: 2000), issuedAt: Timestamp(secondsSince1970: 1000),
            sessionStartedAt: Timestamp(secondsSince1970: 500), readers: [.uid(1)],
            enrolment: Enrolment(uid: 0, pid: 1, at: Timestamp(secondsSince1970: 500)),
            status: RefreshStatus(state: .refreshing, refreshCount: 4, grantStartedAt: Timestamp(secondsSince1970: 1900))
        )
    }

    @Test func rotationReplacesTheRefreshTokenAndKeepsTheSessionStart() throws {
        let received = Timestamp(secondsSince1970: 1950)
        let next = try Self.credential().refreshed(
            with: TokenResponse(accessToken: SecretString("new"), refreshToken: SecretString("r2"), expiresIn: .seconds(60)),
            receivedAt: received)
        #expect(next.accessToken.value == "new")
        #expect(next.refreshToken?.value == "r2")
        #expect(next.issuedAt == received)
        #expect(next.expiresAt == Timestamp(secondsSince1970: 2010))
        #expect(next.sessionStartedAt == Timestamp(secondsSince1970: 500))
        #expect(next.status.state == .valid)
        #expect(next.status.grantStartedAt == nil)
        #expect(next.status.refreshCount == 5)
        #expect(next.scope == "read")
    }

    @Test func withoutANewRefreshTokenTheOldOneStays() throws {
        let next = try Self.credential().refreshed(
            with: TokenResponse(accessToken: SecretString("new"), expiresIn: .seconds(60)), receivedAt: Timestamp(secondsSince1970: 1950))
        #expect(next.refreshToken?.value == "r1")
    }

    @Test func aResponseWithoutALifetimeGetsTheAssumedOne() throws {
        // The tokens are kept (the refresh token may have rotated); the lifetime is assumed.
        let next = try Self.credential().refreshed(
            with: TokenResponse(accessToken: SecretString("opaque"), refreshToken: SecretString("r2")),
            receivedAt: Timestamp(secondsSince1970: 1950),
            assumedLifetime: .seconds(120))
        #expect(next.expiresAt == Timestamp(secondsSince1970: 2070))
        #expect(next.refreshToken?.value == "r2")
    }
}

struct EndpointPolicyTests {
    @Test(arguments: [
        "https://idp.example.com/token", "http://127.0.0.1:8765/o/token/", "http://localhost/t", "http://[::1]:80/t", "http://127.8.9.10/t",
    ])
    func allowed(url: String) throws {
        _ = try EndpointPolicy.check(url)
    }

    @Test(arguments: [
        "http://idp.example.com/token", "http://10.0.0.1/t", "ftp://127.0.0.1/t", "https://user:pw@idp.example.com/t", "idp.example.com/t",
        "http://128.0.0.1/t", "http:///t",
    ])
    func refused(url: String) {
        #expect(throws: EndpointPolicy.Violation.self) { try EndpointPolicy.check(url) }
    }

    @Test func partsAreParsed() throws {
        let url = try #require(ParsedURL("https://IdP.Example.com:8443/o/token/?x=1"))
        #expect(url.scheme == "https")
        #expect(url.host == "idp.example.com")
        #expect(url.port == 8443)
        #expect(url.path == "/o/token/?x=1")
    }
}

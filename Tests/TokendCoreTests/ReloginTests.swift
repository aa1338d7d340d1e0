import Testing
import TokendJSON
import TokendTestSupport

@testable import TokendCore

/// The re-login date of a credential and the warnings said ahead of it.
struct ReloginDeadlineTests {
    static let start = Timestamp(secondsSince1970: 1_700_000_000)
    static let lifetimes: [Duration] = [
        .seconds(1), .seconds(10), .seconds(40), .seconds(3600), .seconds(86_400), .seconds(7 * 86_400), .seconds(30 * 86_400),
        .seconds(90 * 86_400),
    ]

    /// Which end is the credential's re-login date, for every cap and every lifetime: each cap in
    /// turn is made the earliest, and it must be the one chosen, with its reason.
    @Test(arguments: lifetimes, ReloginDeadline.Reason.allCases)
    func theEarliestHardEndIsChosen(lifetime: Duration, reason: ReloginDeadline.Reason) {
        let start = Self.start
        let longer = lifetime + lifetime + .seconds(1)
        var policy = RefreshPolicy(maxTokenAge: longer, maxSessionAge: longer)
        var times = CredentialTimes(issuedAt: start, expiresAt: start + longer + .seconds(5), sessionStartedAt: start)
        var renewable = true
        var refreshEnd: Timestamp? = start + longer
        switch reason {
        case .maxTokenAge:
            renewable = false
            policy.maxTokenAge = lifetime
        case .tokenExpiry:
            renewable = false
            times.expiresAt = start + lifetime
        case .sessionEnd:
            policy.maxSessionAge = lifetime
        case .refreshTokenExpiry:
            refreshEnd = start + lifetime
        }
        let deadline = ReloginDeadline.of(
            times: times, policy: policy, renewable: renewable, refreshTokenExpiresAt: refreshEnd, refreshTokenIssuedAt: start)
        #expect(deadline?.at == start + lifetime)
        #expect(deadline?.reason == reason)
    }

    /// A renewable credential's token deadline moves with every refresh: it is no re-login date.
    @Test(arguments: lifetimes)
    func aRenewableTokensOwnDeadlineIsNoEnd(lifetime: Duration) {
        let times = CredentialTimes(issuedAt: Self.start, expiresAt: Self.start + lifetime, sessionStartedAt: Self.start)
        let none = ReloginDeadline.of(
            times: times, policy: RefreshPolicy(maxTokenAge: lifetime), renewable: true, refreshTokenExpiresAt: nil,
            refreshTokenIssuedAt: Self.start)
        #expect(none == nil)
    }

    @Test func aProviderThatRenewsWithoutARefreshTokenCountsAsRenewable() {
        var policy = RefreshPolicy(maxTokenAge: .seconds(60))
        policy.renewsWithoutRefreshToken = true
        let credential = Credential(
            userIdentifier: "u", provider: "p", accessToken: SecretString("a"), refreshToken: nil, tokenType: "Bearer", scope: nil,
            expiresAt: Self.start + .seconds(60), issuedAt: Self.start, sessionStartedAt: Self.start, readers: [],
            enrolment: Enrolment(uid: 1, pid: 1, at: Self.start))
        #expect(ReloginDeadline.of(credential, policy: policy) == nil)
        policy.renewsWithoutRefreshToken = false
        #expect(ReloginDeadline.of(credential, policy: policy)?.reason == .maxTokenAge)
    }

    @Test func aHATLoginEndsWithItsTokensExpiry() {
        var policy = RefreshPolicy(maxSessionAge: .seconds(30 * 86_400))
        policy.expiryEndsSession = true
        let times = CredentialTimes(issuedAt: Self.start, expiresAt: Self.start + .seconds(3 * 86_400), sessionStartedAt: Self.start)
        let deadline = ReloginDeadline.of(
            times: times, policy: policy, renewable: true, refreshTokenExpiresAt: nil, refreshTokenIssuedAt: Self.start)
        #expect(deadline == ReloginDeadline(at: Self.start + .seconds(3 * 86_400), reason: .sessionEnd, knownSince: Self.start))
    }
}

struct RefreshTokenExpiryTests {
    static let now = Timestamp(secondsSince1970: 1_700_000_000)

    static func jwt(exp: Int64) -> String {
        "eyJhbGciOiJub25lIn0." + Base64URL.encode(Array("{\"exp\":\(exp)}".utf8)) + ".sig"
    }

    @Test(arguments: [
        (#"{"access_token":"a","refresh_token":"r","refresh_expires_in":1800}"#, Optional(Int64(1800))),
        (#"{"access_token":"a","refresh_token":"r","refresh_expires_in":"60"}"#, 60),
        (#"{"access_token":"a","refresh_token":"r","refresh_expires_in":0}"#, nil),
        (#"{"access_token":"a","refresh_token":"r","refresh_expires_in":-5}"#, nil),
        (#"{"access_token":"a","refresh_token":"r","refresh_expires_in":"soon"}"#, nil),
        (#"{"access_token":"a","refresh_token":"r"}"#, nil),
    ])
    func refreshExpiresInIsRead(body: String, seconds: Int64?) throws {
        let response = try TokenResponse.parse(Array(body.utf8))
        #expect(response.refreshExpiresIn == seconds.map { .seconds($0) })
        #expect(response.refreshTokenExpiry(receivedAt: Self.now) == seconds.map { Self.now + .seconds($0) })
    }

    @Test func aJWTRefreshTokensExpIsItsExpiry() throws {
        let body = #"{"access_token":"a","refresh_token":"\#(Self.jwt(exp: 1_700_000_500))"}"#
        let response = try TokenResponse.parse(Array(body.utf8))
        #expect(response.refreshTokenExpiry(receivedAt: Self.now) == Timestamp(secondsSince1970: 1_700_000_500))
    }

    @Test func aRefreshKeepsOrReplacesTheRefreshTokensExpiry() throws {
        var credential = Credential(
            userIdentifier: "u", provider: "p", accessToken: SecretString("a"), refreshToken: SecretString("r"), tokenType: "Bearer",
            scope: nil, expiresAt: Self.now + .seconds(60), issuedAt: Self.now, sessionStartedAt: Self.now, readers: [],
            enrolment: Enrolment(uid: 1, pid: 1, at: Self.now))
        credential.refreshTokenExpiresAt = Self.now + .seconds(1000)
        let later = Self.now + .seconds(100)
        // Not rotated, not restated: the expiry stays.
        let kept = try credential.refreshed(
            with: TokenResponse.parse(Array(#"{"access_token":"b","expires_in":60}"#.utf8)), receivedAt: later)
        #expect(kept.refreshTokenExpiresAt == Self.now + .seconds(1000))
        // Rotated with a stated lifetime: the new one.
        let rotated = try credential.refreshed(
            with: TokenResponse.parse(Array(#"{"access_token":"b","refresh_token":"r2","refresh_expires_in":300}"#.utf8)), receivedAt: later
        )
        #expect(rotated.refreshTokenExpiresAt == later + .seconds(300))
        // Rotated without one: unknown again.
        let unknown = try credential.refreshed(
            with: TokenResponse.parse(Array(#"{"access_token":"b","refresh_token":"r2","expires_in":60}"#.utf8)), receivedAt: later)
        #expect(unknown.refreshTokenExpiresAt == nil)
    }
}

struct ReloginWarningPlanTests {
    static let start = Timestamp(secondsSince1970: 1_700_000_000)

    static func thresholds(_ texts: [String]) -> [ReloginThreshold] { texts.map { try! ReloginThreshold(parsing: $0) } }

    @Test func thresholdsParseAndRefuseNonsense() throws {
        #expect(try ReloginThreshold(parsing: "7d").lead == .seconds(7 * 86_400))
        #expect(try ReloginThreshold(parsing: "1h30m").label == "1h30m")
        for bad in ["", "0s", "7", "soon", "-1d"] { #expect(throws: DurationFormat.ParseError.self) { try ReloginThreshold(parsing: bad) } }
        #expect(ReloginThreshold.defaults.map(\.label) == ["7d", "1d", "1h"])
    }

    /// The 40 s login with warnings at 30 s and 10 s: nothing until 10 s in, the 30 s warning
    /// then, the 10 s warning at 30 s, nothing at or after the end.
    @Test func theFortySecondLogin() {
        let deadline = ReloginDeadline(at: Self.start + .seconds(40), reason: .sessionEnd, knownSince: Self.start)
        let thresholds = Self.thresholds(["30s", "10s"])
        let first = ReloginWarningPlan.decide(deadline: deadline, thresholds: thresholds, record: nil, now: Self.start)
        #expect(first.say == nil)
        #expect(first.changed == false)
        #expect(first.wakeAt == Self.start + .seconds(10))
        let second = ReloginWarningPlan.decide(deadline: deadline, thresholds: thresholds, record: nil, now: Self.start + .seconds(10))
        #expect(second.say?.label == "30s")
        #expect(second.changed)
        #expect(second.wakeAt == Self.start + .seconds(30))
        // Asked again (a restart): said already.
        let again = ReloginWarningPlan.decide(
            deadline: deadline, thresholds: thresholds, record: second.record, now: Self.start + .seconds(20))
        #expect(again.say == nil)
        #expect(again.changed == false)
        #expect(again.inForce?.label == "30s")
        #expect(first.inForce == nil)
        let third = ReloginWarningPlan.decide(
            deadline: deadline, thresholds: thresholds, record: second.record, now: Self.start + .seconds(31))
        #expect(third.say?.label == "10s")
        #expect(third.wakeAt == nil)
        let late = ReloginWarningPlan.decide(deadline: deadline, thresholds: thresholds, record: nil, now: Self.start + .seconds(40))
        #expect(late.say == nil)
        #expect(late.wakeAt == nil)
        #expect(late.inForce == nil)
    }

    /// Down across several thresholds: one warning at start-up, the latest passed.
    @Test func aDowntimeAcrossThresholdsGivesOnlyTheLatest() {
        let deadline = ReloginDeadline(at: Self.start + .seconds(30 * 86_400), reason: .sessionEnd, knownSince: Self.start)
        let thresholds = ReloginThreshold.defaults
        let saidWeek = ReloginWarningPlan.decide(
            deadline: deadline, thresholds: thresholds, record: nil, now: deadline.at - .seconds(7 * 86_400))
        #expect(saidWeek.say?.label == "7d")
        // Back 30 minutes before the end: the 1d and 1h thresholds have passed; only 1h is said.
        let back = ReloginWarningPlan.decide(
            deadline: deadline, thresholds: thresholds, record: saidWeek.record, now: deadline.at - .seconds(1800))
        #expect(back.say?.label == "1h")
        #expect(back.record.said == Set(thresholds.map(\.lead.milliseconds)))
        #expect(back.wakeAt == nil)
    }

    /// A login shorter than a threshold is not greeted with it; a new date starts afresh.
    @Test func thresholdsPassedBeforeTheDateWasKnownAreNotSaid() {
        let deadline = ReloginDeadline(at: Self.start + .seconds(20 * 3600), reason: .sessionEnd, knownSince: Self.start)
        let plan = ReloginWarningPlan.decide(deadline: deadline, thresholds: ReloginThreshold.defaults, record: nil, now: Self.start)
        #expect(plan.say == nil)
        #expect(plan.wakeAt == deadline.at - .seconds(3600))
        let old = ReloginWarningRecord(reloginBy: 5, said: [3_600_000])
        let renewed = ReloginWarningPlan.decide(
            deadline: deadline, thresholds: ReloginThreshold.defaults, record: old, now: deadline.at - .seconds(10))
        #expect(renewed.say?.label == "1h")
        #expect(renewed.record.reloginBy == deadline.at.secondsSince1970)
    }

    @Test(arguments: ["1234:", "1234:3600000", "1234:1000,86400000,3600000"])
    func recordsRoundTrip(text: String) throws {
        let record = try #require(ReloginWarningRecord(encoded: text))
        #expect(ReloginWarningRecord(encoded: record.encoded) == record)
    }

    @Test(arguments: ["", "x:1", "12", "12:a", "12:1,,x"])
    func unreadableRecordsAreNone(text: String) {
        #expect(ReloginWarningRecord(encoded: text) == nil)
    }

    /// Over lifetimes 1 s – 90 d and threshold sets, stepping from wake to wake with a restart
    /// (only the record kept) at arbitrary points: each threshold that passes after the login
    /// is said at most once, in order, never after the deadline; without downtime every one is.
    @Test(arguments: ReloginDeadlineTests.lifetimes, [["7d", "1d", "1h"], ["30s", "10s"], ["1s"], ["90d", "1d", "500ms"]])
    func eachThresholdIsSaidOnceWithoutDowntime(lifetime: Duration, texts: [String]) {
        let thresholds = Self.thresholds(texts)
        let deadline = ReloginDeadline(at: Self.start + lifetime, reason: .maxTokenAge, knownSince: Self.start)
        var record: ReloginWarningRecord?
        var now = Self.start
        var said: [String] = []
        for _ in 0..<100 {
            let plan = ReloginWarningPlan.decide(deadline: deadline, thresholds: thresholds, record: record, now: now)
            if let say = plan.say {
                #expect(now < deadline.at)
                said.append(say.label)
            }
            if plan.changed { record = plan.record }
            guard let wake = plan.wakeAt else { break }
            #expect(wake > now)
            now = wake
        }
        let expected = thresholds.filter { deadline.at - $0.lead >= Self.start }.sorted { $0.lead > $1.lead }.map(\.label)
        #expect(said == expected)
    }

    @Test(arguments: ReloginDeadlineTests.lifetimes)
    func aDowntimeNeverRepeatsNorSaysLate(lifetime: Duration) {
        let thresholds = Self.thresholds(["7d", "1d", "1h", "30s", "10s", "1s"])
        let deadline = ReloginDeadline(at: Self.start + lifetime, reason: .sessionEnd, knownSince: Self.start)
        var random = SeededGenerator(seed: UInt64(lifetime.milliseconds))
        for _ in 0..<50 {
            var record: ReloginWarningRecord?
            var said: [Duration] = []
            var now = Self.start
            // Visit a few arbitrary moments in order (a daemon that was down in between).
            var moments = (0..<4).map { _ in Self.start + .milliseconds(Int64(random.next() % UInt64(lifetime.milliseconds + 2000))) }
            moments.sort()
            for moment in moments where moment >= now {
                now = moment
                let plan = ReloginWarningPlan.decide(deadline: deadline, thresholds: thresholds, record: record, now: now)
                if let say = plan.say {
                    #expect(now < deadline.at)
                    #expect(deadline.at - say.lead <= now)
                    #expect(!said.contains(say.lead))
                    // Never one longer than one already said.
                    #expect(said.allSatisfy { $0 > say.lead })
                    said.append(say.lead)
                }
                if plan.changed { record = plan.record }
            }
        }
    }
}

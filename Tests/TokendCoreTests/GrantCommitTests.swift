import Testing
import TokendJSON

@testable import TokendCore

/// A step of a commit as the tables below name it: the action, logs by level and message.
private func shape(_ action: GrantAction) -> String {
    switch action {
    case .noteRefreshTokenNarrowed(let lost): "noteRefreshTokenNarrowed(\(lost.joined(separator: " ")))"
    case .dropServedNarrowedTokens: "dropServedNarrowedTokens"
    case .noteAssumedLifetime: "noteAssumedLifetime"
    case .storeCredential(let kind): "storeCredential(\(kind))"
    case .storeStatus: "storeStatus"
    case .setFailures(let count): "setFailures(\(count.map(String.init) ?? "nil"))"
    case .publish: "publish"
    case .publishEnded: "publishEnded"
    case .cancelRefresh: "cancelRefresh"
    case .serveNarrowed: "serveNarrowed"
    case .log(let line): "\(line.level): \(line.message)"
    }
}

private func logs(_ commit: GrantCommit) -> [GrantLog] {
    commit.actions.compactMap { if case .log(let line) = $0 { line } else { nil } }
}

private func jwt(sub: String) -> String {
    let claims = #"{"iat":1000,"exp":9000,"sub":"\#(sub)"}"#
    return "eyJhbGciOiJub25lIn0." + Base64URL.encode(Array(claims.utf8)) + ".c2ln"
}

/// The fixture: alice's credential, marked in flight at 1900, its token good until 2000; the
/// answer comes at 1950. Backoff: 10 s doubling, jitter at its lowest (half the ceiling).
private enum Fixture {
    static let received = Timestamp(secondsSince1970: 1950)
    static let marker = Timestamp(secondsSince1970: 1900)

    static func credential(accessToken: String = "old-access-token", narrowed: Bool = false) -> Credential {
        var credential = Credential(
            userIdentifier: "alice", provider: "idp", accessToken: SecretString(accessToken),
            refreshToken: SecretString("old-refresh-token"),
            tokenType: "Bearer", scope: "read write", expiresAt: Timestamp(secondsSince1970: 2000),
            issuedAt: Timestamp(secondsSince1970: 1000), sessionStartedAt: Timestamp(secondsSince1970: 500), readers: [.uid(1)],
            enrolment: Enrolment(uid: 0, pid: 1, at: Timestamp(secondsSince1970: 500)),
            status: RefreshStatus(state: .refreshing, refreshCount: 4, grantStartedAt: marker))
        if narrowed {
            credential.keep(
                NarrowedToken(
                    key: "scope=read", scope: "read", resource: nil, accessToken: SecretString("narrowed-token"), tokenType: "Bearer",
                    issuedAt: Timestamp(secondsSince1970: 1000), expiresAt: Timestamp(secondsSince1970: 2000),
                    enrolledAt: credential.enrolment.at))
        }
        return credential
    }

    static func context(attempt: Int = 1, unresolvedBefore: Bool = false) -> GrantCommitContext {
        GrantCommitContext(
            provider: "idp", policy: RefreshPolicy(), received: received, attempt: attempt,
            backoff: Backoff(initial: .seconds(10), maximum: .seconds(300)), random: 0, unresolvedBefore: unresolvedBefore)
    }

    static func success(
        access: String = "new-access-token", refresh: String? = "new-refresh-token", expiresIn: Duration? = .seconds(600),
        scope: String? = nil
    ) -> GrantOutcome {
        .success(
            TokenResponse(
                accessToken: SecretString(access), refreshToken: refresh.map(SecretString.init), expiresIn: expiresIn, scope: scope))
    }
}

/// What a refresh grant's outcome does (``GrantCommit/refresh(_:of:context:)``).
struct GrantCommitRefreshTests {
    struct Case: Sendable, CustomTestStringConvertible {
        var name: String
        var outcome: GrantOutcome
        var narrowedBefore = false
        var accessBefore = "old-access-token"
        var unresolvedBefore = false
        var attempt = 1
        /// The next credential: state, access token, refresh token, marker, retry time.
        var state: CredentialState
        var accessToken: String
        var refreshToken = "old-refresh-token"
        var markerKept: Bool
        var retryIn: Duration?
        var actions: [String]
        var reply: GrantReply
        var testDescription: String { name }
    }

    static let cases: [Case] = [
        Case(
            name: "success, refresh token rotated", outcome: Fixture.success(), state: .valid, accessToken: "new-access-token",
            refreshToken: "new-refresh-token", markerKept: false,
            actions: ["storeCredential(refresh)", "setFailures(nil)", "publish", "info: credential refreshed"], reply: .entry),
        Case(
            name: "success, refresh token kept", outcome: Fixture.success(refresh: nil), attempt: 3, state: .valid,
            accessToken: "new-access-token", markerKept: false,
            actions: ["storeCredential(refresh)", "setFailures(nil)", "publish", "info: credential refreshed"], reply: .entry),
        Case(
            name: "success without expires_in", outcome: Fixture.success(expiresIn: nil), state: .valid, accessToken: "new-access-token",
            refreshToken: "new-refresh-token", markerKept: false,
            actions: ["noteAssumedLifetime", "storeCredential(refresh)", "setFailures(nil)", "publish", "info: credential refreshed"],
            reply: .entry),
        Case(
            name: "success after narrowed grants, scope lost: the provider narrowed the refresh token",
            outcome: Fixture.success(scope: "read"), narrowedBefore: true, state: .valid, accessToken: "new-access-token",
            refreshToken: "new-refresh-token", markerKept: false,
            actions: [
                "noteRefreshTokenNarrowed(write)", "dropServedNarrowedTokens", "storeCredential(refresh)", "setFailures(nil)", "publish",
                "info: credential refreshed",
            ], reply: .entry),
        Case(
            name: "success after narrowed grants, scope kept", outcome: Fixture.success(scope: "read write"), narrowedBefore: true,
            state: .valid, accessToken: "new-access-token", refreshToken: "new-refresh-token", markerKept: false,
            actions: ["storeCredential(refresh)", "setFailures(nil)", "publish", "info: credential refreshed"], reply: .entry),
        Case(
            name: "a token no fresher than the one it replaces", outcome: Fixture.success(expiresIn: .seconds(30)), attempt: 2,
            state: .retrying, accessToken: "new-access-token", refreshToken: "new-refresh-token", markerKept: false,
            retryIn: .seconds(10),
            actions: ["storeCredential(refresh)", "setFailures(2)", "publish", "warning: refresh brought no fresher token; will retry"],
            reply: .entry),
        Case(
            name: "a token expired on arrival", outcome: Fixture.success(expiresIn: .zero), state: .retrying,
            accessToken: "old-access-token", refreshToken: "new-refresh-token", markerKept: false, retryIn: .seconds(5),
            actions: ["storeCredential(refresh)", "setFailures(1)", "publish", "warning: refresh brought no fresher token; will retry"],
            reply: .refreshFailed(
                reason: "the provider answered with a token that had already expired (check the provider's and this host's clocks)",
                retryAt: Fixture.received + .seconds(5))),
        Case(
            name: "a token for another subject", outcome: Fixture.success(access: jwt(sub: "mallory")), accessBefore: jwt(sub: "alice"),
            state: .retrying, accessToken: jwt(sub: "alice"), markerKept: true, retryIn: .seconds(5),
            actions: ["setFailures(1)", "storeStatus", "publish", "warning: refresh failed; will retry"],
            reply: .refreshFailed(
                reason: "the token endpoint's answer is unusable: the new access token is for another subject than the credential's",
                retryAt: Fixture.received + .seconds(5))),
        Case(
            name: "invalid_grant", outcome: .permanent(error: "invalid_grant", description: nil), state: .reauthenticationRequired,
            accessToken: "old-access-token", markerKept: false,
            actions: ["storeStatus", "publishEnded", "cancelRefresh", "setFailures(nil)", "warning: reauthentication required"],
            reply: .reauthenticationRequired(reason: "invalid_grant")),
        Case(
            name: "transient with Retry-After", outcome: .transient(reason: "the token endpoint answered 503", retryAfter: .seconds(120)),
            attempt: 2, state: .retrying, accessToken: "old-access-token", markerKept: false, retryIn: .seconds(120),
            actions: ["setFailures(2)", "storeStatus", "publish", "warning: refresh failed; will retry"],
            reply: .refreshFailed(reason: "the token endpoint answered 503", retryAt: Fixture.received + .seconds(120))),
        Case(
            name: "transient while an earlier grant is unresolved",
            outcome: .transient(reason: "the token endpoint answered 500", retryAfter: nil), unresolvedBefore: true, attempt: 3,
            state: .retrying, accessToken: "old-access-token", markerKept: true, retryIn: .seconds(20),
            actions: ["setFailures(3)", "storeStatus", "publish", "warning: refresh failed; will retry"],
            reply: .refreshFailed(reason: "the token endpoint answered 500", retryAt: Fixture.received + .seconds(20))),
        Case(
            name: "unanswered", outcome: .unanswered(reason: "the token endpoint did not answer in time"), state: .retrying,
            accessToken: "old-access-token", markerKept: true, retryIn: .seconds(5),
            actions: ["setFailures(1)", "storeStatus", "publish", "warning: refresh failed; will retry"],
            reply: .refreshFailed(reason: "the token endpoint did not answer in time", retryAt: Fixture.received + .seconds(5))),
    ]

    @Test(arguments: cases)
    func outcome(_ test: Case) {
        let credential = Fixture.credential(accessToken: test.accessBefore, narrowed: test.narrowedBefore)
        let commit = GrantCommit.refresh(
            test.outcome, of: credential, context: Fixture.context(attempt: test.attempt, unresolvedBefore: test.unresolvedBefore))
        #expect(commit.actions.map(shape) == test.actions)
        #expect(commit.reply == test.reply)
        #expect(commit.next.status.state == test.state)
        #expect(commit.next.accessToken.value == test.accessToken)
        #expect(commit.next.refreshToken?.value == test.refreshToken)
        #expect((commit.next.status.grantStartedAt == Fixture.marker) == test.markerKept)
        #expect(commit.next.status.retryAt == test.retryIn.map { Fixture.received + $0 })
        // The credential's identity and its login's start never move.
        #expect(commit.next.userIdentifier == "alice")
        #expect(commit.next.sessionStartedAt == credential.sessionStartedAt)
        // An answer to publish is published before it is answered.
        if commit.reply == .entry { #expect(commit.actions.contains(.publish)) }
        // Every log line names the credential and its state, and quotes no token.
        for line in logs(commit) {
            #expect(line.metadata["user_identifier"] == "alice")
            #expect(line.metadata["credential_state"] != nil)
            for secret in ["old-access-token", "old-refresh-token", "new-access-token", "new-refresh-token"] {
                #expect(!line.message.contains(secret) && !line.metadata.values.contains { $0.contains(secret) })
            }
        }
    }

    @Test func aRefreshLogsWhetherTheRefreshTokenRotatedAndWhenTheTokenExpires() {
        for (refresh, rotated) in [("new-refresh-token", "true"), (nil, "false")] as [(String?, String)] {
            let commit = GrantCommit.refresh(Fixture.success(refresh: refresh), of: Fixture.credential(), context: Fixture.context())
            #expect(
                logs(commit).map(\.metadata) == [
                    [
                        "user_identifier": "alice", "provider": "idp", "rotated": rotated,
                        "expires_in": DurationFormat.humanReadable(.seconds(600)), "credential_state": "valid",
                    ]
                ])
            #expect(commit.next.status.refreshCount == 5)
            #expect(commit.next.status.lastRefreshAt == Fixture.received)
        }
    }

    @Test func aFailureLogsItsAttemptAndWhetherTheGrantsOutcomeIsKnown() {
        let failed = GrantCommit.refresh(
            .transient(reason: "the token endpoint answered 429", retryAfter: nil), of: Fixture.credential(),
            context: Fixture.context(attempt: 2))
        let unknown = GrantCommit.refresh(.unanswered(reason: "timeout"), of: Fixture.credential(), context: Fixture.context(attempt: 2))
        #expect(
            logs(failed).map(\.metadata) == [
                [
                    "user_identifier": "alice", "provider": "idp", "problem": "the token endpoint answered 429", "attempt": "2",
                    "retry_in": DurationFormat.humanReadable(.seconds(10)), "credential_state": "retrying", "grant_outcome": "failed",
                ]
            ])
        #expect(logs(unknown).first?.metadata["grant_outcome"] == "unknown")
        #expect(failed.next.status.lastError == "the token endpoint answered 429")
    }

    /// The provider's free text may quote the tokens it refused: never passed on.
    @Test(
        arguments: [
            ("invalid_grant", "refresh token old-refresh-token is revoked", "invalid_grant: refresh token <redacted> is revoked"),
            ("invalid_client", "bad token old-access-token", "invalid_client: bad token <redacted>"),
            ("invalid_grant", nil, "invalid_grant"),
        ] as [(String, String?, String)])
    func aRefusalIsRedacted(error: String, description: String?, expected: String) {
        let commit = GrantCommit.refresh(
            .permanent(error: error, description: description), of: Fixture.credential(), context: Fixture.context())
        #expect(commit.reply == .reauthenticationRequired(reason: expected))
        #expect(commit.next.status.lastError == expected)
        #expect(commit.next.status.retryAt == nil)
        #expect(logs(commit).first?.metadata["reason"] == expected)
    }

    @Test func aTokenExpiredOnArrivalKeepsTheCurrentTokenAndTheRotatedRefreshToken() {
        let before = Fixture.credential()
        let commit = GrantCommit.refresh(Fixture.success(expiresIn: .zero, scope: "read"), of: before, context: Fixture.context())
        #expect(commit.next.accessToken == before.accessToken)
        #expect(commit.next.scope == before.scope)
        #expect(commit.next.expiresAt == before.expiresAt && commit.next.issuedAt == before.issuedAt)
        #expect(commit.next.refreshToken?.value == "new-refresh-token")
        #expect(logs(commit).first?.metadata["rotated"] == "true")
    }

    @Test func narrowedTokensGoWhenTheProviderNarrowedTheRefreshToken() {
        let commit = GrantCommit.refresh(
            Fixture.success(scope: "read"), of: Fixture.credential(narrowed: true), context: Fixture.context())
        #expect(commit.next.narrowedTokens.isEmpty)
        let kept = GrantCommit.refresh(
            Fixture.success(scope: "read write"), of: Fixture.credential(narrowed: true), context: Fixture.context())
        #expect(kept.next.narrowedTokens.count == 1)
    }
}

/// What a narrowed grant's outcome does (``GrantCommit/narrowed(_:of:narrowing:stateBefore:context:)``).
struct GrantCommitNarrowedTests {
    static func narrowing() throws -> TokenNarrowing {
        try #require(try TokenNarrowing(scope: "read", resource: nil))
    }

    struct Case: Sendable, CustomTestStringConvertible {
        var name: String
        var outcome: GrantOutcome
        var stateBefore: CredentialState?
        var unresolvedBefore = false
        var state: CredentialState
        var refreshToken = "old-refresh-token"
        var markerKept: Bool
        var keepsNarrowed: Bool
        var actions: [String]
        /// The reply's reason when it fails (nil: the narrowed token is the answer).
        var failure: String?
        var retryIn: Duration?
        var testDescription: String { name }
    }

    static let cases: [Case] = [
        Case(
            name: "a narrowed token, refresh token rotated", outcome: Fixture.success(scope: "read"), stateBefore: .valid, state: .valid,
            refreshToken: "new-refresh-token", markerKept: false, keepsNarrowed: true,
            actions: ["storeCredential(narrowed)", "publish", "serveNarrowed", "info: narrowed token obtained"]),
        Case(
            name: "a narrowed token while an earlier grant is unresolved", outcome: Fixture.success(refresh: nil, scope: "read"),
            stateBefore: .retrying, unresolvedBefore: true, state: .retrying, markerKept: false, keepsNarrowed: true,
            actions: ["storeCredential(narrowed)", "publish", "serveNarrowed", "info: narrowed token obtained"]),
        Case(
            name: "a wider token than asked: refused, the rotated refresh token kept", outcome: Fixture.success(scope: "read write"),
            stateBefore: .refreshing, state: .valid, refreshToken: "new-refresh-token", markerKept: false, keepsNarrowed: false,
            actions: ["storeCredential(narrowed)", "publish", "warning: narrowed token refused"],
            failure:
                "the provider answered with scope 'read write', wider than the requested 'read': it does not narrow tokens on refresh"),
        Case(
            name: "a narrowed token expired on arrival", outcome: Fixture.success(expiresIn: .zero, scope: "read"), stateBefore: .valid,
            state: .valid, refreshToken: "new-refresh-token", markerKept: false, keepsNarrowed: false,
            actions: ["storeCredential(narrowed)", "publish", "warning: narrowed token refused"],
            failure:
                "the provider answered with a narrowed token that had already expired (check the provider's and this host's clocks)"),
        Case(
            name: "invalid_scope: the caller's error only", outcome: .permanent(error: "invalid_scope", description: nil),
            stateBefore: .valid,
            state: .valid, markerKept: false, keepsNarrowed: false,
            actions: ["storeStatus", "publish", "warning: narrowed token refused by the provider"],
            failure: "the provider refused a token narrowed to scope 'read': invalid_scope"),
        Case(
            name: "transient with Retry-After, an earlier grant unresolved",
            outcome: .transient(reason: "the token endpoint answered 503", retryAfter: .seconds(30)), stateBefore: .retrying,
            unresolvedBefore: true, state: .retrying, markerKept: true, keepsNarrowed: false,
            actions: ["storeStatus", "publish", "warning: narrowed grant failed"], failure: "the token endpoint answered 503",
            retryIn: .seconds(30)),
        Case(
            name: "unanswered: recovered as the credential's own grant", outcome: .unanswered(reason: "timeout"), stateBefore: .valid,
            state: .retrying, markerKept: true, keepsNarrowed: false,
            actions: ["setFailures(1)", "storeStatus", "publish", "warning: refresh failed; will retry"], failure: "timeout",
            retryIn: .seconds(5)),
    ]

    @Test(arguments: cases)
    func outcome(_ test: Case) throws {
        let narrowing = try Self.narrowing()
        let credential = Fixture.credential()
        let commit = GrantCommit.narrowed(
            test.outcome, of: credential, narrowing: narrowing, stateBefore: test.stateBefore,
            context: Fixture.context(unresolvedBefore: test.unresolvedBefore))
        #expect(commit.actions.map(shape) == test.actions)
        #expect(commit.next.status.state == test.state)
        #expect(commit.next.refreshToken?.value == test.refreshToken)
        #expect((commit.next.status.grantStartedAt == Fixture.marker) == test.markerKept)
        // The credential's own token stays.
        #expect(commit.next.accessToken == credential.accessToken)
        #expect(commit.next.expiresAt == credential.expiresAt)
        let kept = commit.next.narrowedToken(for: narrowing.key)
        #expect((kept != nil) == test.keepsNarrowed)
        if let failure = test.failure {
            #expect(commit.reply == .refreshFailed(reason: failure, retryAt: test.retryIn.map { Fixture.received + $0 }))
        } else {
            let token = try #require(kept)
            #expect(commit.reply == .narrowed(token))
            #expect(commit.actions.contains(.serveNarrowed(token)))
            #expect(token.accessToken.value == "new-access-token")
            #expect(token.scope == "read")
        }
        for line in logs(commit) {
            #expect(line.metadata["user_identifier"] == "alice")
            #expect(!line.metadata.values.contains { $0.contains("new-access-token") || $0.contains("refresh-token") })
        }
    }

    @Test func aRefusalQuotingTheTokensIsRedacted() throws {
        let commit = GrantCommit.narrowed(
            .permanent(error: "invalid_scope", description: "old-refresh-token may not ask for read"), of: Fixture.credential(),
            narrowing: try Self.narrowing(), stateBefore: .valid, context: Fixture.context())
        #expect(
            commit.reply
                == .refreshFailed(
                    reason: "the provider refused a token narrowed to scope 'read': invalid_scope: <redacted> may not ask for read",
                    retryAt: nil))
        #expect(logs(commit).first?.metadata["problem"] == "invalid_scope: <redacted> may not ask for read")
    }

    @Test func anObtainedTokenLogsItsLifetimeAndRotation() throws {
        let commit = GrantCommit.narrowed(
            Fixture.success(refresh: nil, scope: "read"), of: Fixture.credential(), narrowing: try Self.narrowing(), stateBefore: .valid,
            context: Fixture.context())
        #expect(
            logs(commit).map(\.metadata) == [
                [
                    "user_identifier": "alice", "provider": "idp", "narrowing": "scope 'read'", "rotated": "false",
                    "expires_in": DurationFormat.humanReadable(.seconds(600)),
                ]
            ])
    }
}

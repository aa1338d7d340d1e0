import Testing

@testable import TokendCore

/// What a removal revokes: only tokens the provider handed to tokend for the credential.
struct RevocationRuleTests {
    static func credential(refreshToken: String?, lastRefreshAt: Timestamp?) -> Credential {
        Credential(
            userIdentifier: "u", provider: "p", accessToken: SecretString("a"), refreshToken: refreshToken.map { SecretString($0) },
            tokenType: "Bearer", scope: nil, expiresAt: Timestamp(secondsSince1970: 2000), issuedAt: Timestamp(secondsSince1970: 1000),
            sessionStartedAt: Timestamp(secondsSince1970: 1000), readers: [.uid(1)],
            enrolment: Enrolment(uid: 1, pid: 1, at: .init(secondsSince1970: 1000)),
            status: RefreshStatus(state: .valid, lastRefreshAt: lastRefreshAt))
    }

    @Test(arguments: [
        // A caller's AddCredential, never answered by the provider: its tokens may be copies of
        // someone else's (even an access token in the refresh-token field).
        ("r" as String?, nil as Timestamp?, RevocationRule.Decision.nothing),
        (nil, nil, .nothing),
        // A login, or a refresh grant: the refresh token tokend got or had accepted.
        ("r", Timestamp(secondsSince1970: 1500), .refreshToken),
        // Without a refresh token, the access token of tokend's own grant.
        (nil, Timestamp(secondsSince1970: 1500), .accessToken),
    ])
    func onlyWhatTheProviderHandedTokend(refreshToken: String?, lastRefreshAt: Timestamp?, decision: RevocationRule.Decision) {
        #expect(RevocationRule.decide(Self.credential(refreshToken: refreshToken, lastRefreshAt: lastRefreshAt)) == decision)
    }

    /// A refresh grant sets what the rule reads, so an added credential becomes revocable once
    /// tokend has refreshed it.
    @Test func aRefreshMakesAnAddedCredentialRevocable() throws {
        let added = Self.credential(refreshToken: "r", lastRefreshAt: nil)
        let response = try TokenResponse.parse(Array(#"{"access_token":"b","token_type":"Bearer","expires_in":60}"#.utf8))
        let refreshed = try added.refreshed(with: response, receivedAt: Timestamp(secondsSince1970: 1500))
        #expect(RevocationRule.decide(refreshed) == .refreshToken)
    }

    /// An administrator's `revokeAnyway` revokes what a caller added too (a leaked credential
    /// tokend never refreshed); it changes nothing the rule would revoke anyway.
    @Test func anAdministratorMayRevokeWhatACallerAdded() {
        #expect(RevocationRule.decide(Self.credential(refreshToken: "r", lastRefreshAt: nil), anyway: true) == .refreshToken)
        #expect(RevocationRule.decide(Self.credential(refreshToken: nil, lastRefreshAt: nil), anyway: true) == .accessToken)
        #expect(RevocationRule.decide(Self.credential(refreshToken: "r", lastRefreshAt: nil), anyway: false) == .nothing)
        let refreshed = Self.credential(refreshToken: nil, lastRefreshAt: Timestamp(secondsSince1970: 1500))
        #expect(RevocationRule.decide(refreshed, anyway: true) == .accessToken)
    }
}

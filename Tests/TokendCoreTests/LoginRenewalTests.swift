import Testing

@testable import TokendCore

/// A login under a name that has a credential: renewed in place by its owner or an
/// administrator, replaced when asked, refused to everyone else without telling them more.
struct LoginRenewalTests {
    static let access = AccessPolicy(adminGroupIDs: [10])
    static func caller(_ uid: UInt32, groups: [UInt32] = []) -> CallerIdentity {
        CallerIdentity(uid: uid, gid: uid, pid: 1, supplementaryGroups: groups)
    }

    /// Alice (1000) enrolled it for herself; Bob (1001) reads it too.
    static let shared = LoginRenewal.Existing(provider: "idp", readers: [.uid(1000), .uid(1001)], ownerUID: 1000)
    /// An administrator enrolled it for Alice alone (so Alice may manage it, but does not own it).
    static let adminMade = LoginRenewal.Existing(provider: "idp", readers: [.uid(1000)], ownerUID: 0)

    typealias Row = (
        existing: LoginRenewal.Existing?, caller: UInt32, groups: [UInt32], provider: String, readers: Bool, replace: Bool,
        expected: Result<LoginRenewal.Placement, LoginRenewal.Refusal>
    )

    @Test(
        arguments: [
            (nil, 1000, [], "idp", false, false, .success(.new)),
            (nil, 1000, [], "idp", true, true, .success(.new)),
            // The owner renews; an administrator (root, or by group) too.
            (shared, 1000, [], "idp", false, false, .success(.renew)),
            (shared, 0, [], "idp", false, false, .success(.renew)),
            (shared, 2000, [10], "idp", false, false, .success(.renew)),
            // A reader who is not the owner, and a stranger: the refusal of a replacement.
            (shared, 1001, [], "idp", false, false, .failure(.enrolment(.notPermitted))),
            (shared, 3000, [], "idp", false, false, .failure(.enrolment(.notPermitted))),
            (shared, 3000, [], "other", true, true, .failure(.enrolment(.notPermitted))),
            // The owner of a shared credential may renew it but not replace it (its readers are not hers alone).
            (shared, 1000, [], "idp", false, true, .failure(.enrolment(.notPermitted))),
            (shared, 0, [], "idp", true, true, .success(.replace)),
            // Alice may replace the credential an administrator made for her, not renew it.
            (adminMade, 1000, [], "idp", false, true, .success(.replace)),
            (adminMade, 1000, [], "idp", false, false, .failure(.notOwner)),
            // A renewal keeps provider and readers.
            (shared, 1000, [], "other", false, false, .failure(.otherProvider("idp"))),
            (shared, 1000, [], "idp", true, false, .failure(.readersGiven)),
        ] as [Row])
    func decides(row: Row) {
        let result = Result { () throws(LoginRenewal.Refusal) -> LoginRenewal.Placement in
            try LoginRenewal.decide(
                existing: row.existing, provider: row.provider, readersGiven: row.readers, replace: row.replace,
                caller: Self.caller(row.caller, groups: row.groups), access: Self.access)
        }
        #expect(result == row.expected)
    }

    static func credential(refresh: String?, access: String = "at", lastRefreshAt: Timestamp? = Timestamp(secondsSince1970: 100))
        -> Credential
    {
        Credential(
            userIdentifier: "alice", provider: "idp", accessToken: SecretString(access), refreshToken: refresh.map(SecretString.init),
            tokenType: "Bearer", scope: "read", expiresAt: Timestamp(secondsSince1970: 4000), issuedAt: Timestamp(secondsSince1970: 400),
            sessionStartedAt: Timestamp(secondsSince1970: 400), readers: [.uid(1000), .uid(1001)],
            enrolment: Enrolment(uid: 1000, pid: 7, at: Timestamp(secondsSince1970: 50)),
            status: RefreshStatus(state: .valid, lastRefreshAt: lastRefreshAt))
    }

    @Test func theRenewedCredentialKeepsNameReadersOwnerAndProvider() {
        var old = Self.credential(refresh: "rt-old")
        old.narrowedTokens = [
            NarrowedToken(
                key: "scope=read", scope: "read", resource: nil, accessToken: SecretString("n"), tokenType: "Bearer",
                issuedAt: Timestamp(secondsSince1970: 400), expiresAt: Timestamp(secondsSince1970: 900),
                enrolledAt: Timestamp(secondsSince1970: 400))
        ]
        old.generation = 7
        var login = Self.credential(refresh: "rt-new", access: "at-new")
        login.readers = [.uid(0)]
        login.enrolment = Enrolment(uid: 0, pid: 99, at: Timestamp(secondsSince1970: 5000))
        let renewed = LoginRenewal.renewed(old, with: login)
        #expect(renewed.readers == old.readers && renewed.enrolment == old.enrolment && renewed.provider == "idp")
        #expect(renewed.accessToken == SecretString("at-new") && renewed.refreshToken == SecretString("rt-new"))
        #expect(renewed.narrowedTokens.isEmpty && renewed.generation == 7)
    }

    @Test(
        arguments: [
            // tokend's own grant: the old refresh token goes.
            ("rt-old", "rt-new", true, RevocationRule.Decision.refreshToken),
            // The provider handed back the same refresh token: it is the new credential's.
            ("rt-old", "rt-old", true, .nothing),
            // Tokens a program added (never answered by the provider to tokend): nothing.
            ("rt-old", "rt-new", false, .nothing),
            // No refresh token: tokend's own access token.
            (nil, "rt-new", true, .accessToken),
        ] as [(String?, String?, Bool, RevocationRule.Decision)])
    func revokesOnlyWhatTokendObtained(old: String?, new: String?, obtained: Bool, expected: RevocationRule.Decision) {
        let before = Self.credential(refresh: old, lastRefreshAt: obtained ? Timestamp(secondsSince1970: 100) : nil)
        let after = Self.credential(refresh: new, access: "at-new")
        #expect(LoginRenewal.revocation(old: before, renewed: after) == expected)
    }
}

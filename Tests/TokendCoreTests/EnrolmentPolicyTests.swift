import Testing

@testable import TokendCore

/// The rules `AddCredential` and `BeginLogin` share, checked directly.
struct EnrolmentPolicyTests {
    let policy = EnrolmentPolicy(access: AccessPolicy(adminGroupIDs: [950]), quotas: UserQuotas(credentialsPerUID: 2))
    let alice = CallerIdentity(uid: 1000, gid: 1000, pid: 10)
    let admin = CallerIdentity(uid: 1002, gid: 950, pid: 12)

    @Test func readersDefaultToTheCallersUID() throws {
        #expect(try EnrolmentPolicy.readers(requested: nil, caller: alice) == [.uid(1000)])
        #expect(try EnrolmentPolicy.readers(requested: ["uid:5", "group:ops"], caller: alice) == [.uid(5), .group("ops")])
    }

    @Test(arguments: [[], ["uid:"], ["someone"], ["uid:1", "gid:x"]])
    func badReaderListsAreRefused(texts: [String]) {
        #expect(throws: EnrolmentRefusal.invalidReaders) { try EnrolmentPolicy.readers(requested: texts, caller: alice) }
    }

    func enrol(_ policy: EnrolmentPolicy, _ readers: [Reader], user: String = "x", provider: String = "p", caller: CallerIdentity)
        throws(EnrolmentRefusal)
    {
        try policy.checkEnrolment(user: user, provider: provider, readers: readers, caller: caller)
    }

    @Test func aUserMayEnrolOnlyForThemself() throws {
        try enrol(policy, [.uid(1000)], caller: alice)
        #expect(throws: EnrolmentRefusal.notPermitted) { try enrol(policy, [.uid(1001)], caller: alice) }
        #expect(throws: EnrolmentRefusal.notPermitted) { try enrol(policy, [.uid(1000), .gid(1000)], caller: alice) }
        try enrol(policy, [.uid(1001), .group("ops")], caller: admin)
    }

    @Test func selfEnrolmentCanBeTurnedOff() {
        let closed = EnrolmentPolicy(access: AccessPolicy(allowSelfEnrolment: false), quotas: UserQuotas())
        #expect(throws: EnrolmentRefusal.notPermitted) { try enrol(closed, [.uid(1000)], caller: alice) }
    }

    /// A name a token file refers to: administrators and the uids its configuration names may
    /// enrol, replace or remove it; anyone else is refused with the reason, even for themself.
    @Test(arguments: [
        (1000 as UInt32, nil as EnrolmentRefusal?), (1001, .reservedName(referredToBy: "token_files.backup")), (1002, nil),
    ])
    func aReservedNameIsForAdministratorsAndItsNamedUids(uid: UInt32, refusal: EnrolmentRefusal?) {
        var reserved = policy
        reserved.reservedNames = ["backup": .init(referredToBy: "token_files.backup", enrollingUIDs: [1000])]
        let caller = CallerIdentity(uid: uid, gid: uid == 1002 ? 950 : uid, pid: 1)
        let own: [Reader] = [.uid(uid)]
        if let refusal {
            #expect(throws: refusal) { try enrol(reserved, own, user: "backup", caller: caller) }
            #expect(throws: refusal) { try reserved.checkRemoval(user: "backup", readers: own, caller: caller) }
        } else {
            #expect(throws: Never.self) { try enrol(reserved, own, user: "backup", caller: caller) }
            #expect(throws: Never.self) { try reserved.checkRemoval(user: "backup", readers: own, caller: caller) }
        }
        // Other names are not affected.
        #expect(throws: Never.self) { try enrol(reserved, own, user: "other", caller: caller) }
    }

    /// A provider that forbids self-enrolment: administrators only; others are refused with the
    /// provider named, before their readers are even looked at.
    @Test func aProviderMayForbidSelfEnrolment() throws {
        var limited = policy
        limited.selfEnrolment = ["cmd": false, "idp": true]
        #expect(throws: EnrolmentRefusal.providerForbidsSelfEnrolment(provider: "cmd")) {
            try enrol(limited, [.uid(1000)], provider: "cmd", caller: alice)
        }
        try enrol(limited, [.uid(1000)], provider: "idp", caller: alice)
        try enrol(limited, [.uid(1001)], provider: "cmd", caller: admin)
        // Removing what one enrolled earlier stays possible.
        try limited.checkRemoval(user: "x", readers: [.uid(1000)], caller: alice)
    }

    /// Whether the caller may manage the existing credential is checked before whether it
    /// asked to replace it: someone else's credential is not even confirmed to exist.
    @Test func someoneElsesCredentialIsNotRevealed() {
        #expect(throws: EnrolmentRefusal.notPermitted) {
            try policy.checkPlacement(existing: [.uid(1001)], replace: false, held: 0, caller: alice)
        }
        #expect(throws: EnrolmentRefusal.notPermitted) {
            try policy.checkPlacement(existing: [.uid(1001)], replace: true, held: 0, caller: alice)
        }
    }

    @Test func anExistingCredentialNeedsReplace() throws {
        #expect(throws: EnrolmentRefusal.exists) {
            try policy.checkPlacement(existing: [.uid(1000)], replace: false, held: 0, caller: alice)
        }
        try policy.checkPlacement(existing: [.uid(1000)], replace: true, held: 1, caller: alice)
        #expect(throws: EnrolmentRefusal.exists) {
            try policy.checkPlacement(existing: [.uid(1000)], replace: false, held: 0, caller: admin)
        }
    }

    @Test func theQuotaCountsWhatIsHeldAndPending() throws {
        try policy.checkPlacement(existing: nil, replace: false, held: 1, caller: alice)
        #expect(throws: EnrolmentRefusal.quota(QuotaRefusal(.credentialsPerUID, limit: 2))) {
            try policy.checkPlacement(existing: nil, replace: false, held: 2, caller: alice)
        }
        // Administrators are not counted.
        try policy.checkPlacement(existing: nil, replace: false, held: 10_000, caller: admin)
    }
}

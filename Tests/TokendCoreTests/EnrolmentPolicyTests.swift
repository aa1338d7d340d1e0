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

    @Test func aUserMayEnrolOnlyForThemself() throws {
        try policy.checkReaders([.uid(1000)], caller: alice)
        #expect(throws: EnrolmentRefusal.notPermitted) { try policy.checkReaders([.uid(1001)], caller: alice) }
        #expect(throws: EnrolmentRefusal.notPermitted) { try policy.checkReaders([.uid(1000), .gid(1000)], caller: alice) }
        try policy.checkReaders([.uid(1001), .group("ops")], caller: admin)
    }

    @Test func selfEnrolmentCanBeTurnedOff() {
        let closed = EnrolmentPolicy(access: AccessPolicy(allowSelfEnrolment: false), quotas: UserQuotas())
        #expect(throws: EnrolmentRefusal.notPermitted) { try closed.checkReaders([.uid(1000)], caller: alice) }
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

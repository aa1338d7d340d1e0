import Testing

@testable import TokendCore

struct AccessPolicyTests {
    let policy = AccessPolicy(adminGroupIDs: [950])
    let alice = CallerIdentity(uid: 1000, gid: 1000, pid: 10, supplementaryGroups: [27, 100])
    let bob = CallerIdentity(uid: 1001, gid: 1001, pid: 11)

    @Test func rootIsAdmin() {
        #expect(policy.isAdmin(CallerIdentity(uid: 0, gid: 0, pid: 1)))
        #expect(AccessPolicy().isAdmin(CallerIdentity(uid: 0, gid: 12345, pid: 1)))
    }

    @Test func adminViaSupplementaryGroup() {
        let admin = CallerIdentity(uid: 1002, gid: 1002, pid: 12, supplementaryGroups: [20, 950])
        #expect(policy.isAdmin(admin))
    }

    @Test func adminViaPrimaryGroup() {
        #expect(policy.isAdmin(CallerIdentity(uid: 1002, gid: 950, pid: 12)))
    }

    @Test func ordinaryUsersAreNotAdmins() {
        #expect(!policy.isAdmin(alice))
        #expect(!policy.isAdmin(bob))
        #expect(!AccessPolicy().isAdmin(alice))
    }

    @Test func mayReadByUid() {
        #expect(policy.mayRead(alice, readers: ResolvedReaders(uids: [1000])))
        #expect(policy.mayRead(alice, readers: ResolvedReaders(uids: [5, 1000, 7])))
    }

    @Test func mayReadByPrimaryGid() {
        #expect(policy.mayRead(bob, readers: ResolvedReaders(gids: [1001])))
    }

    @Test func mayReadBySupplementaryGid() {
        #expect(policy.mayRead(alice, readers: ResolvedReaders(gids: [100])))
    }

    @Test func readingIsDeniedOtherwise() {
        #expect(!policy.mayRead(alice, readers: ResolvedReaders()))
        #expect(!policy.mayRead(alice, readers: ResolvedReaders(uids: [1001], gids: [1001, 101])))
        // A gid number equal to the caller's uid grants nothing, and vice versa.
        #expect(!policy.mayRead(bob, readers: ResolvedReaders(uids: [1002], gids: [1000])))
        #expect(!policy.mayRead(CallerIdentity(uid: 1000, gid: 5, pid: 1), readers: ResolvedReaders(gids: [1000])))
    }

    @Test func adminsDoNotReadImplicitly() {
        let root = CallerIdentity(uid: 0, gid: 0, pid: 1)
        #expect(!policy.mayRead(root, readers: ResolvedReaders(uids: [1000])))
        #expect(policy.mayInspect(root, readers: ResolvedReaders(uids: [1000])))
    }

    @Test func mayInspectReadersAndAdminsOnly() {
        let readers = ResolvedReaders(uids: [1000])
        #expect(policy.mayInspect(alice, readers: readers))
        #expect(!policy.mayInspect(bob, readers: readers))
        #expect(policy.mayInspect(CallerIdentity(uid: 5, gid: 5, pid: 1, supplementaryGroups: [950]), readers: readers))
    }

    @Test func adminsMayManageAnything() {
        let admin = CallerIdentity(uid: 1002, gid: 1002, pid: 12, supplementaryGroups: [950])
        #expect(policy.mayManage(admin, readers: [.uid(1000), .group("backup")]))
        #expect(policy.mayManage(admin, readers: []))
        let strict = AccessPolicy(adminGroupIDs: [950], allowSelfEnrolment: false)
        #expect(strict.mayManage(admin, readers: [.uid(1000)]))
        #expect(strict.mayManage(CallerIdentity(uid: 0, gid: 0, pid: 1), readers: [.uid(1000)]))
    }

    @Test func selfEnrolmentAllowedForExactlyOwnUid() {
        #expect(policy.mayManage(alice, readers: [.uid(1000)]))
    }

    @Test(arguments: [
        [Reader](), [.uid(1001)], [.uid(1000), .uid(1001)], [.uid(1000), .uid(1000)], [.user("alice")],
        [.gid(1000)], [.uid(1000), .gid(100)], [.group("alice")],
    ])
    func selfEnrolmentDeniedForAnyOtherReaderList(readers: [Reader]) {
        #expect(!policy.mayManage(alice, readers: readers))
    }

    @Test func selfEnrolmentCanBeDisabled() {
        let strict = AccessPolicy(adminGroupIDs: [950], allowSelfEnrolment: false)
        #expect(!strict.mayManage(alice, readers: [.uid(1000)]))
    }

    @Test func defaults() {
        let defaults = AccessPolicy()
        #expect(defaults.adminGroupIDs.isEmpty)
        #expect(defaults.allowSelfEnrolment)
    }
}

struct CallerIdentityTests {
    @Test func membership() {
        let caller = CallerIdentity(uid: 1, gid: 2, pid: 3, supplementaryGroups: [4, 5])
        #expect(caller.isMember(of: 2))
        #expect(caller.isMember(of: 5))
        #expect(!caller.isMember(of: 1))
        #expect(!caller.isMember(of: 3))
        #expect(caller.description == "uid=1 gid=2 pid=3")
    }
}

struct ReaderTests {
    @Test(arguments: [
        ("uid:1000", Reader.uid(1000)), ("uid:0", .uid(0)), ("uid:4294967294", .uid(UInt32.max - 1)),
        ("gid:34", .gid(34)), ("user:alice", .user("alice")), ("user:svc-backup_2", .user("svc-backup_2")),
        ("group:backup", .group("backup")), ("user:1000", .user("1000")), ("user:j.doe@example", .user("j.doe@example")),
    ])
    func parsesValidReaders(text: String, expected: Reader) {
        #expect(Reader(text) == expected)
        #expect(Reader(Substring(text)) == expected)
    }

    @Test(arguments: [
        "", "uid", "uid:", "uid:-1", "uid:abc", "uid:4294967295", "uid:4294967296", "uid:1.5", "gid:", "gid:x", "user:", "group:",
        "alice", ":alice", "foo:bar", "UID:1000", "User:alice", "user:a b", "user: alice", "user:alice ", "user:a:b",
        "group:a\tb", "uid :1000", "user:al\nice",
    ])
    func rejectsInvalidReaders(text: String) {
        #expect(Reader(text) == nil)
    }

    @Test(arguments: [Reader.uid(1000), .gid(34), .user("alice"), .group("backup")])
    func descriptionRoundTrips(reader: Reader) {
        #expect(Reader(reader.description) == reader)
    }

    @Test func descriptions() {
        #expect(Reader.uid(1000).description == "uid:1000")
        #expect(Reader.gid(34).description == "gid:34")
        #expect(Reader.user("alice").description == "user:alice")
        #expect(Reader.group("backup").description == "group:backup")
    }
}

struct ResolvedReadersTests {
    let users: [String: UInt32] = ["alice": 1000, "bob": 1001]
    let groups: [String: UInt32] = ["backup": 34, "staff": 50]

    func resolve(_ readers: [Reader]) -> ResolvedReaders {
        ResolvedReaders(readers, userID: { users[$0] }, groupID: { groups[$0] })
    }

    @Test func resolvesNamesAndKeepsNumbers() {
        let resolved = resolve([.user("alice"), .uid(7), .group("backup"), .gid(99)])
        #expect(resolved.uids == [1000, 7])
        #expect(resolved.gids == [34, 99])
        #expect(resolved.unresolved.isEmpty)
    }

    @Test func unresolvedNamesGrantNothing() {
        let resolved = resolve([.user("mallory"), .group("wheel")])
        #expect(resolved.uids.isEmpty)
        #expect(resolved.gids.isEmpty)
        #expect(resolved.unresolved == [.user("mallory"), .group("wheel")])
        let caller = CallerIdentity(uid: 1000, gid: 34, pid: 1)
        #expect(!AccessPolicy().mayRead(caller, readers: resolved))
    }

    @Test func userNamesAreLookedUpAsUsersAndGroupNamesAsGroups() {
        // "backup" is a group, not a user: user:backup must not resolve through the group table.
        let resolved = resolve([.user("backup"), .group("alice")])
        #expect(resolved.uids.isEmpty)
        #expect(resolved.gids.isEmpty)
        #expect(resolved.unresolved == [.user("backup"), .group("alice")])
    }

    @Test func mixedResolution() {
        let resolved = resolve([.user("bob"), .user("ghost"), .group("staff")])
        #expect(resolved.uids == [1001])
        #expect(resolved.gids == [50])
        #expect(resolved.unresolved == [.user("ghost")])
        #expect(AccessPolicy().mayRead(CallerIdentity(uid: 1001, gid: 1001, pid: 1), readers: resolved))
        #expect(AccessPolicy().mayRead(CallerIdentity(uid: 5, gid: 5, pid: 1, supplementaryGroups: [50]), readers: resolved))
        #expect(!AccessPolicy().mayRead(CallerIdentity(uid: 5, gid: 5, pid: 1), readers: resolved))
    }

    @Test func numericReadersNeedNoLookup() {
        let resolved = ResolvedReaders(
            [.uid(1), .gid(2)],
            userID: { _ in
                Issue.record("user lookup called")
                return nil
            },
            groupID: { _ in
                Issue.record("group lookup called")
                return nil
            })
        #expect(resolved == ResolvedReaders(uids: [1], gids: [2]))
    }
}

struct ConstantTimeTests {
    @Test func equalOnlyForTheSameBytes() {
        #expect(ConstantTime.equal("state-1234", "state-1234"))
        #expect(!ConstantTime.equal("state-1234", "state-1235"))
        #expect(!ConstantTime.equal("state-1234", "state-123"))
        #expect(!ConstantTime.equal("", "x"))
        #expect(ConstantTime.equal("", ""))
        #expect(!ConstantTime.equal("é", "e\u{301}"), "bytes, not canonically equivalent characters")
    }
}

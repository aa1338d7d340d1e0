import Testing
import TokendCore

/// Program readers as pure decisions: which facts match which reader, combined readers, and that
/// user-only reader lists never ask for program facts (the unit a cgroup names:
/// ``CgroupUnitTests``).
struct ProgramReaderPolicyTests {
    static let hash = String(repeating: "ab", count: 32)
    let policy = AccessPolicy()
    let alice = CallerIdentity(uid: 1000, gid: 1000, pid: 42)

    static let demoFacts = ProgramFacts(unit: "demo.service", executable: "/usr/bin/demo", sha256: hash)

    @Test(arguments: [
        ("unit:demo.service", true), ("unit:other.service", false), ("exe:/usr/bin/demo", true), ("exe:/usr/bin/other", false),
        ("exe:/usr/bin/demo@sha256:\(hash)", true), ("exe:/usr/bin/demo@sha256:\(String(repeating: "cd", count: 32))", false),
        ("exe:/usr/bin/other@sha256:\(hash)", false), ("uid:1000+unit:demo.service", true), ("uid:1001+unit:demo.service", false),
        ("uid:1000+exe:/usr/bin/demo", true), ("uid:1000+unit:other.service", false), ("uid:1001", false), ("gid:1000", true),
    ])
    func programReaderDecides(reader text: String, granted: Bool) throws {
        let readers = ResolvedReaders([try Reader(parsing: text)], userID: { _ in nil }, groupID: { _ in nil })
        let decision = policy.readDecision(alice, readers: readers) { _ in .success(Self.demoFacts) }
        #expect((decision == .granted) == granted)
    }

    @Test func aUserNameJoinedToAProgramIsResolvedAndFailsClosedWhenUnknown() throws {
        let readers = [try Reader(parsing: "user:alice+unit:demo.service"), try Reader(parsing: "user:nobody+unit:demo.service")]
        let resolved = ResolvedReaders(readers, userID: { $0 == "alice" ? 1000 : nil }, groupID: { _ in nil })
        #expect(resolved.programs == [ProgramReader(uid: 1000, program: .unit("demo.service"))])
        #expect(resolved.unresolved == [readers[1]])
        #expect(policy.readDecision(alice, readers: resolved) { _ in .success(Self.demoFacts) } == .granted)
        let bob = CallerIdentity(uid: 1001, gid: 1001, pid: 43)
        #expect(policy.readDecision(bob, readers: resolved) { _ in .success(Self.demoFacts) } != .granted)
    }

    @Test(arguments: [["uid:1000"], ["uid:1001"], ["gid:5", "uid:7"], ["group:g", "user:u"]])
    func userAndGroupReadersNeverAskForProgramFacts(readers texts: [String]) throws {
        let readers = ResolvedReaders(try texts.map { try Reader(parsing: $0) }, userID: { _ in 7 }, groupID: { _ in 5 })
        _ = policy.readDecision(alice, readers: readers) { _ in
            Issue.record("program facts asked for")
            return .failure(.noPidfd)
        }
    }

    @Test(arguments: [
        ("unit:demo.service", [false]), ("exe:/usr/bin/demo", [false]), ("exe:/usr/bin/demo@sha256:\(hash)", [false, true]),
        // The caller runs another path: its executable is not hashed.
        ("exe:/usr/bin/other@sha256:\(hash)", [false]),
    ])
    func theHashIsAskedForOnlyWhenAHashedReaderNamesTheCallersPath(reader text: String, asked expected: [Bool]) throws {
        var asked: [Bool] = []
        let readers = ResolvedReaders([try Reader(parsing: text)], userID: { _ in nil }, groupID: { _ in nil })
        _ = policy.readDecision(alice, readers: readers) { withHash in
            asked.append(withHash)
            var facts = Self.demoFacts
            if !withHash { facts.sha256 = nil }
            return .success(facts)
        }
        #expect(asked == expected)
    }

    @Test func aCombinedReaderForAnotherUIDDoesNotAskForFacts() throws {
        let readers = ResolvedReaders([try Reader(parsing: "uid:1001+unit:demo.service")], userID: { _ in nil }, groupID: { _ in nil })
        let decision = policy.readDecision(alice, readers: readers) { _ in
            Issue.record("program facts asked for")
            return .success(Self.demoFacts)
        }
        #expect(decision == .refused(why: "uid 1000 is joined to none of the program readers"))
    }

    @Test(arguments: [ProgramFactsUnavailable.noPidfd, .processExited, .unreadable("/proc/42 is not readable")])
    func unknownFactsRefuseAndSayWhy(_ unavailable: ProgramFactsUnavailable) throws {
        let readers = ResolvedReaders([try Reader(parsing: "unit:demo.service")], userID: { _ in nil }, groupID: { _ in nil })
        let decision = policy.readDecision(alice, readers: readers) { _ in .failure(unavailable) }
        #expect(decision == .refused(why: "program readers not checked: \(unavailable)"))
    }

    @Test func aRefusalNamesTheFactThatDidNotMatch() throws {
        let readers = ResolvedReaders(
            [
                try Reader(parsing: "unit:other.service"),
                try Reader(parsing: "exe:/usr/bin/demo@sha256:\(String(repeating: "cd", count: 32))"),
            ],
            userID: { _ in nil }, groupID: { _ in nil })
        let decision = policy.readDecision(alice, readers: readers) { _ in .success(Self.demoFacts) }
        #expect(decision == .refused(why: "unit demo.service is not other.service; executable /usr/bin/demo has a different sha256"))
    }

    @Test func aCallerWithoutAProgramSourceIsRefusedByProgramReadersOnly() throws {
        let readers = ResolvedReaders([.uid(1000), .unit("demo.service")], userID: { _ in nil }, groupID: { _ in nil })
        #expect(policy.mayRead(alice, readers: readers))
        #expect(!policy.mayRead(CallerIdentity(uid: 1001, gid: 1001, pid: 5), readers: readers))
    }

    @Test func theSourceReadsOnceAndAgainOnlyForTheHash() {
        let calls = Counter()
        let source = ProgramFactsSource { withHash in
            calls.add(withHash)
            return .success(Self.demoFacts)
        }
        _ = source.facts(withHash: false)
        _ = source.facts(withHash: false)
        _ = source.facts(withHash: true)
        _ = source.facts(withHash: true)
        _ = source.facts(withHash: false)
        #expect(calls.values == [false, true])
    }

    @Test func anExitedProcessStaysRefused() {
        let calls = Counter()
        let source = ProgramFactsSource { withHash in
            calls.add(withHash)
            return .failure(.processExited)
        }
        #expect(source.facts(withHash: false) == .failure(.processExited))
        #expect(source.facts(withHash: true) == .failure(.processExited))
        #expect(calls.values == [false])
    }

    @Test(arguments: [
        (["uid:1000+unit:demo.service"], true), (["uid:1000+exe:/usr/bin/demo"], true), (["uid:1001+unit:demo.service"], false),
        (["unit:demo.service"], false), (["user:alice+unit:demo.service"], false),
        (["uid:1000", "uid:1000+unit:demo.service"], false),
    ])
    func selfEnrolmentMayNarrowToOwnProgram(readers texts: [String], allowed: Bool) throws {
        #expect(policy.mayManage(alice, readers: try texts.map { try Reader(parsing: $0) }) == allowed)
    }
}

/// Records calls from a `@Sendable` closure.
private final class Counter: @unchecked Sendable {
    private var recorded: [Bool] = []
    func add(_ value: Bool) { recorded.append(value) }
    var values: [Bool] { recorded }
}

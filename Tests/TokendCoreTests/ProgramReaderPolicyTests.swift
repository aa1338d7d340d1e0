import Testing
import TokendCore

/// Program readers as pure decisions: which facts match which reader, combined readers, and that
/// user-only reader lists never ask for program facts (the unit a cgroup names:
/// ``CgroupUnitTests``).
struct ProgramReaderPolicyTests {
    static let hash = String(repeating: "ab", count: 32)
    let policy = AccessPolicy()
    /// A call written by the process that connected (as ``CallSenders`` finds it).
    let alice = CallerIdentity(uid: 1000, gid: 1000, pid: 42, sender: .connector(pid: 42))

    static let demoFacts = ProgramFacts(unit: "demo.service", executable: "/usr/bin/demo", sha256: hash)

    /// The decision for alice on a credential whose only reader is `text`, her program
    /// showing `facts`.
    func readDecision(of text: String, facts: ProgramFacts = demoFacts) throws -> ReadDecision {
        let readers = ResolvedReaders([try Reader(parsing: text)], userID: { _ in nil }, groupID: { _ in nil })
        return policy.readDecision(alice, readers: readers) { _ in .success(facts) }
    }

    @Test(arguments: [
        ("unit:demo.service", true), ("unit:other.service", false), ("exe:/usr/bin/demo", true), ("exe:/usr/bin/other", false),
        ("exe:/usr/bin/demo@sha256:\(hash)", true), ("exe:/usr/bin/demo@sha256:\(String(repeating: "cd", count: 32))", false),
        ("exe:/usr/bin/other@sha256:\(hash)", false), ("uid:1000+unit:demo.service", true), ("uid:1001+unit:demo.service", false),
        ("uid:1000+exe:/usr/bin/demo", true), ("uid:1000+unit:other.service", false), ("uid:1001", false), ("gid:1000", true),
    ])
    func programReaderDecides(reader text: String, granted: Bool) throws {
        #expect((try readDecision(of: text) == .granted) == granted)
    }

    @Test func aUserNameJoinedToAProgramIsResolvedAndFailsClosedWhenUnknown() throws {
        let readers = [try Reader(parsing: "user:alice+unit:demo.service"), try Reader(parsing: "user:nobody+unit:demo.service")]
        let resolved = ResolvedReaders(readers, userID: { $0 == "alice" ? 1000 : nil }, groupID: { _ in nil })
        #expect(resolved.programs == [ProgramReader(uid: 1000, program: .unit("demo.service"))])
        #expect(resolved.unresolved == [readers[1]])
        #expect(policy.readDecision(alice, readers: resolved) { _ in .success(Self.demoFacts) } == .granted)
        let bob = CallerIdentity(uid: 1001, gid: 1001, pid: 43, sender: .connector(pid: 43))
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
        ("unit:demo.service", [ProgramFacts.Need.unit]), ("exe:/usr/bin/demo", [.executable]),
        ("exe:/usr/bin/demo@sha256:\(hash)", [.executable, .hash]), ("uid:1000+unit:demo.service", [.unit]),
        (["unit:demo.service", "exe:/usr/bin/demo"].joined(separator: "|"), [.executable]),
        // The caller runs another path: its executable is not hashed.
        ("exe:/usr/bin/other@sha256:\(hash)", [.executable]),
    ])
    func theFactsAskedForAreThoseTheReadersNeed(readers text: String, asked expected: [ProgramFacts.Need]) throws {
        var asked: [ProgramFacts.Need] = []
        let readers = ResolvedReaders(
            try text.split(separator: "|").map { try Reader(parsing: $0) }, userID: { _ in nil }, groupID: { _ in nil })
        _ = policy.readDecision(alice, readers: readers) { need in
            asked.append(need)
            var facts = Self.demoFacts
            if need < .hash { facts.sha256 = nil }
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

    @Test func theSourceReadsOncePerCheckAndAgainOnlyForMore() {
        let calls = NeedCounter()
        let source = ProgramFactsSource { need in
            calls.add(need)
            return .success(Self.demoFacts)
        }
        _ = source.facts(.unit, check: 1)
        _ = source.facts(.unit, check: 1)
        _ = source.facts(.executable, check: 1)
        _ = source.facts(.unit, check: 1)
        _ = source.facts(.hash, check: 1)
        _ = source.facts(.hash, check: 1)
        _ = source.facts(.executable, check: 1)
        #expect(calls.values == [.unit, .executable, .hash])
        // A new check (the next call, a watcher's update) reads them as they are then.
        _ = source.facts(.unit, check: 2)
        _ = source.facts(.unit, check: 2)
        #expect(calls.values == [.unit, .executable, .hash, .unit])
        // Check 0 is no check: read every time.
        _ = source.facts(.unit, check: 0)
        _ = source.facts(.unit, check: 0)
        #expect(calls.values == [.unit, .executable, .hash, .unit, .unit, .unit])
    }

    @Test func anExitedProcessStaysRefused() {
        let calls = NeedCounter()
        let source = ProgramFactsSource { need in
            calls.add(need)
            return .failure(.processExited)
        }
        #expect(source.facts(.unit, check: 1) == .failure(.processExited))
        #expect(source.facts(.hash, check: 2) == .failure(.processExited))
        #expect(calls.values == [.unit])
    }

    /// The facts are the connecting process's: a call someone else wrote on its connection, or
    /// one whose writer is not known, is refused without reading them.
    @Test(arguments: [
        (
            CallSender.anotherProcess(pid: 77, connector: 42),
            "program readers not checked: the call was sent by pid 77, not by the process that connected (pid 42)"
        ),
        (CallSender.unknown, "program readers not checked: the process that sent the call is not known (reconnect)"),
    ])
    func aCallTheConnectorDidNotWriteIsRefused(sender: CallSender, why: String) throws {
        var caller = alice
        caller.sender = sender
        for text in ["unit:demo.service", "exe:/usr/bin/demo", "uid:1000+unit:demo.service"] {
            let readers = ResolvedReaders([try Reader(parsing: text)], userID: { _ in nil }, groupID: { _ in nil })
            let decision = policy.readDecision(caller, readers: readers) { _ in
                Issue.record("program facts asked for")
                return .success(Self.demoFacts)
            }
            #expect(decision == .refused(why: why))
        }
        // uid and group readers keep the identity of the process that connected.
        #expect(policy.mayRead(caller, readers: ResolvedReaders([.uid(1000)], userID: { _ in nil }, groupID: { _ in nil })))
    }

    /// The kernel shows the named path, but tokend finds another file there (the process
    /// mounted its own over it in a mount namespace of its own): `exe:` readers refuse, with or
    /// without a hash; the unit still counts.
    @Test(arguments: [("exe:/usr/bin/demo", false), ("exe:/usr/bin/demo@sha256:\(hash)", false), ("unit:demo.service", true)])
    func anExecutableThatIsNotTheFileAtItsPathIsNotThatPath(reader text: String, granted: Bool) throws {
        var facts = Self.demoFacts
        facts.executableIsAtItsPath = false
        let decision = try readDecision(of: text, facts: facts)
        #expect(
            decision
                == (granted
                    ? .granted
                    : .refused(why: "executable /usr/bin/demo is not the file at that path (another mount namespace, or replaced)")))
    }

    /// A process that has run another file since it connected is not the executable that
    /// connected; it is still in its unit.
    @Test(arguments: [("exe:/usr/bin/demo@sha256:\(hash)", false), ("exe:/usr/bin/demo", false), ("unit:demo.service", true)])
    func aProcessThatExecedAnotherFileSinceItConnectedIsNoExecutableReader(reader text: String, granted: Bool) throws {
        var facts = Self.demoFacts
        facts.execedSinceConnect = true
        let decision = try readDecision(of: text, facts: facts)
        #expect(
            decision
                == (granted
                    ? .granted
                    : .refused(
                        why: "program readers not checked: the process that connected has run another executable since it connected "
                            + "(now /usr/bin/demo)")))
    }

    @Test func aProcessInANestedPidNamespaceIsRefused() throws {
        var facts = Self.demoFacts
        facts.inTokendsPidNamespace = false
        let readers = ResolvedReaders([try Reader(parsing: "unit:demo.service")], userID: { _ in nil }, groupID: { _ in nil })
        let decision = policy.readDecision(alice, readers: readers) { _ in .success(facts) }
        #expect(
            decision
                == .refused(
                    why: "program readers not checked: the process that connected is in another pid namespace, "
                        + "where the sender of a call is not proven"))
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
private final class NeedCounter: @unchecked Sendable {
    // @unchecked: the closures run synchronously on the test's thread.
    private var recorded: [ProgramFacts.Need] = []
    func add(_ value: ProgramFacts.Need) { recorded.append(value) }
    var values: [ProgramFacts.Need] { recorded }
}

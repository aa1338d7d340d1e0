import Testing

@testable import TokendCore

/// Program readers that can never match on a host, by what tokend can read there.
@Suite struct ProgramReaderReachTests {
    static let everything = ProgramFactsAvailability(peerPidfd: true, otherUsersExecutables: true, otherUsersProcesses: true, ownUID: 0)
    /// The shipped unit: user tokend (uid 990), no CAP_SYS_PTRACE, ProtectProc=default.
    static let shipped = ProgramFactsAvailability(peerPidfd: true, otherUsersExecutables: false, otherUsersProcesses: true, ownUID: 990)

    static func problem(_ text: String, _ availability: ProgramFactsAvailability, accountUID: UInt32? = nil) throws -> String? {
        ProgramReaderReach.problem(try Reader(parsing: text), accountUID: accountUID, availability: availability)
    }

    @Test(arguments: ["uid:1000", "user:alice", "gid:34", "group:backup"])
    func userAndGroupReadersAlwaysCanMatch(reader: String) throws {
        var nothing = Self.shipped
        nothing.peerPidfd = false
        nothing.otherUsersProcesses = false
        #expect(try Self.problem(reader, nothing) == nil)
    }

    @Test(arguments: [
        "unit:backup.service", "exe:/usr/bin/backup", "uid:1000+unit:backup.service",
        "user:alice+exe:/usr/bin/backup@sha256:"
            + String(repeating: "a", count: 64),
    ])
    func withoutAPidfdNoProgramReaderMatches(reader: String) throws {
        var old = Self.everything
        old.peerPidfd = false
        let problem = try #require(try Self.problem(reader, old))
        #expect(problem.contains("can never match") && problem.contains("SO_PEERPIDFD"), "\(problem)")
        #expect(try Self.problem(reader, Self.everything) == nil, "root with a pidfd reads everything")
    }

    @Test func exeReadersOfOtherUsersNeedPtraceRights() throws {
        let other = try #require(try Self.problem("uid:1000+exe:/usr/bin/backup", Self.shipped))
        #expect(other.contains("can never match") && other.contains("CAP_SYS_PTRACE"))
        let anyone = try #require(try Self.problem("exe:/usr/bin/backup", Self.shipped))
        #expect(anyone.contains("only programs running as tokend's own uid 990"))
        #expect(try Self.problem("uid:990+exe:/usr/bin/backup", Self.shipped) == nil)
        // A user name is judged by the uid it resolves to; unknown, as a reader without a uid.
        #expect(try Self.problem("user:tokend+exe:/usr/bin/backup", Self.shipped, accountUID: 990) == nil)
        #expect(try Self.problem("user:alice+exe:/usr/bin/backup", Self.shipped, accountUID: 1000)?.contains("can never match") == true)
        #expect(try Self.problem("user:ghost+exe:/usr/bin/backup", Self.shipped)?.contains("only programs") == true)
        // unit: needs only /proc/PID/cgroup, which tokend reads for any user it can see.
        #expect(try Self.problem("uid:1000+unit:backup.service", Self.shipped) == nil)
    }

    @Test func hiddenProcessesHideEveryProgramOfOtherUsers() throws {
        var hidden = Self.shipped
        hidden.otherUsersProcesses = false
        hidden.otherUsersExecutables = true
        #expect(try Self.problem("uid:1000+unit:backup.service", hidden)?.contains("hidepid") == true)
        #expect(try Self.problem("unit:backup.service", hidden)?.contains("only programs running as tokend's own uid 990") == true)
        #expect(try Self.problem("uid:990+unit:backup.service", hidden) == nil)
    }
}

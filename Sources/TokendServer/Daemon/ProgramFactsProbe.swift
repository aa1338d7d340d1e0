import Synchronization
import TokendCore

#if canImport(Glibc)
    import Glibc
#endif

/// What this host lets tokend learn about a caller's program (``ProgramFactsAvailability``),
/// probed once at start the way the calls will need it.
enum ProgramFactsProbe {
    /// `SO_PEERPIDFD` (Linux 6.5); Glibc does not name it.
    static let peerPidfdOption: CInt = 77
    /// `CAP_SYS_PTRACE`'s bit in `/proc/self/status`'s `CapEff`.
    static let ptraceCapability = 19

    static func probe() -> ProgramFactsAvailability {
        ProgramFactsAvailability(
            peerPidfd: kernelGivesPeerPidfd(), otherUsersExecutables: hasCapability(ptraceCapability),
            otherUsersProcesses: seesOtherUsersProcesses(), ownUID: geteuid())
    }

    /// Whether `getsockopt(SO_PEERPIDFD)` works, on a socket pair of this process (a kernel
    /// before 6.5 answers `ENOPROTOOPT`).
    static func kernelGivesPeerPidfd() -> Bool {
        var pair: [CInt] = [-1, -1]
        guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &pair) == 0 else { return false }
        defer {
            close(pair[0])
            close(pair[1])
        }
        var pidfd: CInt = -1
        var length = socklen_t(MemoryLayout<CInt>.size)
        guard getsockopt(pair[0], SOL_SOCKET, peerPidfdOption, &pidfd, &length) == 0 else { return false }
        if pidfd >= 0 { close(pidfd) }
        return true
    }

    /// Whether `capability` is in this process's effective set.
    static func hasCapability(_ capability: Int) -> Bool {
        guard let status = try? String(contentsOfFile: "/proc/self/status") else { return geteuid() == 0 }
        guard let line = status.split(separator: "\n").first(where: { $0.hasPrefix("CapEff:") }),
            let mask = UInt64(line.dropFirst("CapEff:".count).trimmingPrefix(while: { $0 == " " || $0 == "\t" }), radix: 16)
        else { return false }
        return mask & (1 << UInt64(capability)) != 0
    }

    /// Whether another user's `/proc/PID` is visible: PID 1's, which root owns, to a tokend that
    /// is not root (`hidepid`, `ProtectProc=invisible` hide it).
    static func seesOtherUsersProcesses() -> Bool {
        guard geteuid() != 0 else { return true }
        var info = stat()
        return stat("/proc/1", &info) == 0
    }
}

/// The readers of a credential that grant nothing here, or less than they say
/// (``ProgramReaderReach``), with user names resolved as calls resolve them.
struct ReaderWarnings: Sendable {
    let availability: ProgramFactsAvailability

    /// As ``problems(_:)`` for readers as a request gives them (one that does not parse is the
    /// enrolment's to refuse).
    func problems(texts: [String]) -> [String] { problems(texts.compactMap { try? Reader(parsing: $0) }) }

    func problems(_ readers: [Reader]) -> [String] {
        readers.compactMap { reader in
            var account: UInt32?
            if case .combined(.user(let name), _) = reader { account = SystemIdentity.userID(named: name) }
            return ProgramReaderReach.problem(reader, accountUID: account, availability: availability)
        }
    }

    /// One line for `Status` about every credential in `entries` with such readers, or none.
    func summary(of entries: [ViewEntry]) -> String? {
        let affected = entries.filter { !problems($0.readers).isEmpty }
        guard let first = affected.first else { return nil }
        let names = affected.prefix(5).map(\.userIdentifier).joined(separator: ", ") + (affected.count > 5 ? ", …" : "")
        return "\(affected.count) \(affected.count == 1 ? "credential has" : "credentials have") readers that grant nothing here "
            + "(\(names)); e.g. \(first.userIdentifier): \(problems(first.readers)[0])"
    }
}

/// What tokend found at start that does not do what the configuration says, kept for
/// administrators' `Status` after it was logged.
final class SetupWarnings: Sendable {
    private let warnings = Mutex<[String]>([])

    func add(_ warning: String) { warnings.withLock { $0.append(warning) } }

    var all: [String] { warnings.withLock { $0 } }
}

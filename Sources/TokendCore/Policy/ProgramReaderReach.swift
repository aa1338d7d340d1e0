/// What tokend can learn on this host about the program behind a connection, which program
/// readers (`unit:`, `exe:`) are checked against. Probed once at start.
public struct ProgramFactsAvailability: Sendable, Hashable {
    /// The kernel gives a pidfd for a connection (`SO_PEERPIDFD`, Linux 6.5 and later).
    public var peerPidfd: Bool
    /// tokend may read other users' `/proc/PID/exe` (it has `CAP_SYS_PTRACE`).
    public var otherUsersExecutables: Bool
    /// tokend sees other users' `/proc/PID` (`/proc` without `hidepid`, `ProtectProc=` not
    /// `invisible`).
    public var otherUsersProcesses: Bool
    /// tokend's own uid.
    public var ownUID: UInt32

    public init(peerPidfd: Bool, otherUsersExecutables: Bool, otherUsersProcesses: Bool, ownUID: UInt32) {
        self.peerPidfd = peerPidfd
        self.otherUsersExecutables = otherUsersExecutables
        self.otherUsersProcesses = otherUsersProcesses
        self.ownUID = ownUID
    }
}

/// Whether a program reader can ever grant on this host (``ProgramFactsAvailability``): one that
/// can never match, or only processes of tokend's own uid, is accepted — another node of a
/// shared store, or this one after a change, may read it — but said, so that nobody relies on
/// a reader that grants nothing here.
public enum ProgramReaderReach {
    /// Why `reader` grants nothing here, or less than it says; `nil` when it can match.
    ///
    /// - Parameters:
    ///   - reader: One reader of a credential.
    ///   - accountUID: The uid a `user:NAME+…` reader's name resolves to (`nil`: unknown).
    ///   - availability: What tokend can read here.
    public static func problem(_ reader: Reader, accountUID: UInt32? = nil, availability: ProgramFactsAvailability) -> String? {
        let owner: UInt32?
        let program: Reader.Program
        switch reader {
        case .uid, .user, .gid, .group: return nil
        case .unit(let name): (owner, program) = (nil, .unit(name))
        case .exe(let path, let sha256): (owner, program) = (nil, .exe(path: path, sha256: sha256))
        case .combined(.uid(let uid), let joined): (owner, program) = (uid, joined)
        case .combined(.user, let joined): (owner, program) = (accountUID, joined)
        }
        guard availability.peerPidfd else {
            return "reader \(reader) can never match here: the kernel gives tokend no pidfd for a connection "
                + "(SO_PEERPIDFD, Linux 6.5 or later), so it cannot tell which program is calling"
        }
        let own = availability.ownUID
        // Another user's process: its /proc/PID must be visible, and for exe: its executable readable.
        var limits: [String] = []
        if !availability.otherUsersProcesses {
            limits.append("tokend cannot see other users' processes (/proc is mounted with hidepid, e.g. ProtectProc=invisible)")
        }
        if case .exe = program, !availability.otherUsersExecutables {
            limits.append("tokend cannot read other users' executables (/proc/PID/exe needs CAP_SYS_PTRACE, which it does not have)")
        }
        guard !limits.isEmpty else { return nil }
        switch owner {
        case let uid? where uid == own: return nil
        case .some: return "reader \(reader) can never match here: \(limits.joined(separator: "; "))"
        case nil: return "reader \(reader) matches only programs running as tokend's own uid \(own): \(limits.joined(separator: "; "))"
        }
    }
}

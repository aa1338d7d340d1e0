/// A `unit:` or `exe:` reader, with the uid a combined reader (`uid:1000+unit:x.service`)
/// requires as well; `uid` is `nil` for a program reader on its own.
public struct ProgramReader: Sendable, Hashable {
    public var uid: UInt32?
    public var program: Reader.Program

    public init(uid: UInt32?, program: Reader.Program) {
        self.uid = uid
        self.program = program
    }

    /// Whether a caller with `uid` running as `facts` matches; when it does not, why (for the
    /// log; never sent to the caller).
    public func match(uid callerUID: UInt32, facts: ProgramFacts) -> ProgramMismatch? {
        if let uid, uid != callerUID { return .uid(expected: uid) }
        switch program {
        case .unit(let name):
            return facts.unit == name ? nil : .unit(expected: name, seen: facts.unit)
        case .exe(let path, let sha256):
            guard facts.executable == path else { return .executable(expected: path, seen: facts.executable) }
            guard facts.executableIsAtItsPath else { return .notAtPath(path) }
            guard let sha256 else { return nil }
            return facts.sha256 == sha256 ? nil : .sha256(path: path, seen: facts.sha256Problem ?? "a different sha256")
        }
    }
}

/// Which fact of a calling program differed from a program reader.
public enum ProgramMismatch: Sendable, Hashable, CustomStringConvertible {
    case uid(expected: UInt32)
    case unit(expected: String, seen: String?)
    case executable(expected: String, seen: String?)
    case sha256(path: String, seen: String)
    /// The process runs another file than tokend finds at the path the kernel shows for it.
    case notAtPath(String)

    public var description: String {
        switch self {
        case .uid(let expected): "uid is not \(expected)"
        case .unit(let expected, let seen): "unit \(seen ?? "(none)") is not \(expected)"
        case .executable(let expected, let seen): "executable \(seen ?? "(unknown)") is not \(expected)"
        case .sha256(let path, let seen): "executable \(path) has \(seen)"
        case .notAtPath(let path): "executable \(path) is not the file at that path (another mount namespace, or replaced)"
        }
    }
}

/// What tokend learned about a connecting program from the kernel: its systemd unit (from its
/// cgroup), its executable (from `/proc/PID/exe`), and what makes the kernel's word about it and
/// about who wrote a call trustworthy.
public struct ProgramFacts: Sendable, Hashable {
    /// The unit the system manager put the process in (``unit(fromCgroup:)``); `nil` when it is
    /// in none.
    public var unit: String?
    /// The executable's path as the kernel shows it; `nil` when it could not be read.
    public var executable: String?
    /// Whether ``executable`` names, for tokend, the very file the process runs (the same device
    /// and inode). It does not for a process in a mount namespace of its own that mounted
    /// another file over that path, nor for a file since replaced.
    public var executableIsAtItsPath: Bool
    /// The sha256 of the executable's contents, 64 lower-case hex digits; `nil` when not hashed.
    public var sha256: String?
    /// Why there is no ``sha256`` (e.g. "an executable larger than 256 MiB"), for the log.
    public var sha256Problem: String?
    /// Whether the process runs another file than when tokend accepted its connection (it has
    /// `exec`ed since): it is not the program that connected, and `exe:` readers grant it
    /// nothing.
    public var execedSinceConnect: Bool
    /// Whether the process is in tokend's pid namespace. Only there is the pid the kernel stamps
    /// on each message (``CallSender``) proof of who wrote it: in a nested pid namespace, a process
    /// that administers it (anyone, with an unprivileged user namespace) may stamp its messages
    /// with the pid of another of its processes.
    public var inTokendsPidNamespace: Bool

    /// Facts of a process that runs what it ran when it connected, in tokend's pid namespace.
    public init(unit: String?, executable: String?, sha256: String? = nil, sha256Problem: String? = nil) {
        self.unit = unit
        self.executable = executable
        self.sha256 = sha256
        self.sha256Problem = sha256Problem
        self.executableIsAtItsPath = true
        self.execedSinceConnect = false
        self.inTokendsPidNamespace = true
    }

    /// Why the facts do not show who wrote the call, `nil` when they do: its per-message pid is
    /// not proof, or, for `exe:` readers (`forExecutables`), the process that connected has run
    /// another executable since. A unit stays what it is across an `exec`: its own processes run
    /// what they like.
    public func untrusted(forExecutables: Bool) -> String? {
        if !inTokendsPidNamespace {
            return "the process that connected is in another pid namespace, where the sender of a call is not proven"
        }
        if forExecutables && execedSinceConnect {
            return "the process that connected has run another executable since it connected (now \(executable ?? "(unknown)"))"
        }
        return nil
    }
}

extension ProgramFacts {
    /// Which facts a check needs, in increasing cost: a `unit:` reader only the unit (and what
    /// makes the facts trustworthy), an `exe:` reader also the executable, which is read again at
    /// every call to see an `exec`, and an `@sha256:` reader also its hash.
    public enum Need: Int, Sendable, Hashable, Comparable {
        case unit, executable, hash

        public static func < (lhs: Self, rhs: Self) -> Bool { lhs.rawValue < rhs.rawValue }
    }
}

/// Why a calling program's facts are not known: program readers then grant nothing.
public enum ProgramFactsUnavailable: Error, Sendable, Hashable, CustomStringConvertible {
    /// The kernel gave no pidfd for the connection (`SO_PEERPIDFD` needs Linux 6.5).
    case noPidfd
    /// The process that connected has exited, so its pid may already name another process.
    case processExited
    /// `/proc` could not be read (message without any token).
    case unreadable(String)

    public var description: String {
        switch self {
        case .noPidfd:
            "no pidfd for the connection (SO_PEERPIDFD needs Linux 6.5 or later; the process may have exited before it was accepted)"
        case .processExited: "the calling process exited"
        case .unreadable(let why): why
        }
    }
}

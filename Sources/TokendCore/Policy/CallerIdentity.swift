import Synchronization

/// Who is on the other end of a connection, as the kernel reports it (`SO_PEERCRED` for uid,
/// gid and pid; `SO_PEERGROUPS` for supplementary groups), captured when the connection is
/// accepted, and where its program's facts come from when a program reader needs them.
public struct CallerIdentity: Sendable, Hashable, CustomStringConvertible {
    public var uid: UInt32
    public var gid: UInt32
    public var pid: Int32
    public var supplementaryGroups: [UInt32]
    /// The calling program's unit and executable, read the first time a check needs them;
    /// `nil` where nothing could be learned (then program readers grant nothing). Not part of
    /// equality: two callers with the same ids are the same caller.
    public var program: ProgramFactsSource?

    public init(uid: UInt32, gid: UInt32, pid: Int32, supplementaryGroups: [UInt32] = [], program: ProgramFactsSource? = nil) {
        self.uid = uid
        self.gid = gid
        self.pid = pid
        self.supplementaryGroups = supplementaryGroups
        self.program = program
    }

    /// Whether the caller holds `gid` as its primary or a supplementary group.
    public func isMember(of gid: UInt32) -> Bool {
        self.gid == gid || supplementaryGroups.contains(gid)
    }

    /// The program's facts (`withHash`: including the executable's sha256).
    public func programFacts(withHash: Bool) -> Result<ProgramFacts, ProgramFactsUnavailable> {
        program?.facts(withHash: withHash) ?? .failure(.noPidfd)
    }

    public var description: String { "uid=\(uid) gid=\(gid) pid=\(pid)" }

    public static func == (lhs: Self, rhs: Self) -> Bool {
        lhs.uid == rhs.uid && lhs.gid == rhs.gid && lhs.pid == rhs.pid && lhs.supplementaryGroups == rhs.supplementaryGroups
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(uid)
        hasher.combine(gid)
        hasher.combine(pid)
        hasher.combine(supplementaryGroups)
    }
}

/// Reads a connection's ``ProgramFacts`` at most once (twice when a later check also needs the
/// executable's hash), so that connections whose calls meet no program reader never read them.
public final class ProgramFactsSource: Sendable {
    public typealias Load = @Sendable (_ withHash: Bool) -> Result<ProgramFacts, ProgramFactsUnavailable>

    private let load: Load
    private let release: @Sendable () -> Void
    private let cached = Mutex<(facts: Result<ProgramFacts, ProgramFactsUnavailable>, hashed: Bool)?>(nil)

    /// - Parameters:
    ///   - load: reads the facts (from the kernel); called under a lock, at most twice.
    ///   - release: called once when the last copy goes (closes the pidfd).
    public init(load: @escaping Load, release: @escaping @Sendable () -> Void = {}) {
        self.load = load
        self.release = release
    }

    deinit { release() }

    /// The facts, read on first use; a failure is kept (a process that exited stays exited).
    public func facts(withHash: Bool) -> Result<ProgramFacts, ProgramFactsUnavailable> {
        cached.withLock { state in
            if let known = state {
                if case .failure = known.facts { return known.facts }
                if known.hashed || !withHash { return known.facts }
            }
            let result = load(withHash)
            state = (result, withHash)
            return result
        }
    }
}

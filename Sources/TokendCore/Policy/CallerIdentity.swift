import Synchronization

/// Who is on the other end of a connection, as the kernel reports it (`SO_PEERCRED` for uid,
/// gid and pid; `SO_PEERGROUPS` for supplementary groups), captured when the connection is
/// accepted, and where its program's facts come from when a program reader needs them.
public struct CallerIdentity: Sendable, Hashable, CustomStringConvertible {
    public var uid: UInt32
    public var gid: UInt32
    public var pid: Int32
    public var supplementaryGroups: [UInt32]
    /// Where the connecting program's unit and executable are read from when a check needs
    /// them; `nil` where nothing could be learned (then program readers grant nothing). Not part
    /// of equality, nor are ``sender`` and ``check``: two callers with the same ids are the same
    /// caller.
    public var program: ProgramFactsSource?
    /// Who wrote the call being decided; program readers grant only ``CallSender/connector(pid:)``.
    public var sender: CallSender
    /// The check the facts are read for: one call's checks share them (a `Status` listing checks
    /// every credential), a new one reads them again; 0 reads them every time.
    public var check: UInt64 = 0

    public init(
        uid: UInt32, gid: UInt32, pid: Int32, supplementaryGroups: [UInt32] = [], program: ProgramFactsSource? = nil,
        sender: CallSender = .unknown
    ) {
        self.uid = uid
        self.gid = gid
        self.pid = pid
        self.supplementaryGroups = supplementaryGroups
        self.program = program
        self.sender = sender
    }

    /// Whether the caller holds `gid` as its primary or a supplementary group.
    public func isMember(of gid: UInt32) -> Bool {
        self.gid == gid || supplementaryGroups.contains(gid)
    }

    /// The connecting program's facts, at least those a check `need`s, as of ``check``.
    public func programFacts(_ need: ProgramFacts.Need) -> Result<ProgramFacts, ProgramFactsUnavailable> {
        program?.facts(need, check: check) ?? .failure(.noPidfd)
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

/// Reads a connection's ``ProgramFacts`` from the kernel when a check needs them: once per check
/// (``CallerIdentity/check``; again when a later reader of the same check needs more of them, the
/// executable or its hash), so that calls which meet no program reader never read them, and a
/// process that changes between calls is seen as it is at each.
public final class ProgramFactsSource: Sendable {
    public typealias Load = @Sendable (_ need: ProgramFacts.Need) -> Result<ProgramFacts, ProgramFactsUnavailable>

    private let load: Load
    private let release: @Sendable () -> Void
    private let cached = Mutex<(check: UInt64, facts: Result<ProgramFacts, ProgramFactsUnavailable>, need: ProgramFacts.Need)?>(nil)

    /// - Parameters:
    ///   - load: reads the facts (from the kernel); called under a lock.
    ///   - release: called once when the last copy goes (closes the pidfd).
    public init(load: @escaping Load, release: @escaping @Sendable () -> Void = {}) {
        self.load = load
        self.release = release
    }

    deinit { release() }

    /// The facts as of `check`, at least those `need`ed: read on its first use (0: on every use).
    /// A process that has exited stays exited.
    public func facts(_ need: ProgramFacts.Need, check: UInt64) -> Result<ProgramFacts, ProgramFactsUnavailable> {
        cached.withLock { state in
            if let known = state {
                if case .failure(.processExited) = known.facts { return known.facts }
                if known.check == check, check != 0, known.need >= need { return known.facts }
            }
            let result = load(need)
            state = (check, result, need)
            return result
        }
    }
}

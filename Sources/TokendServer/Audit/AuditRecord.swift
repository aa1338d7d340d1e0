import Logging
import Synchronization
import TokendCore
import TokendOAuth

/// What an audit record says besides its kind, credential, method and count: who asked and
/// which token. Kept as plain values; they become log metadata (each item a journal field,
/// `audit_caller_uid` → `AUDIT_CALLER_UID`) only when the record is written. Built once, at the
/// first release on a connection.
struct AuditRecord: Sendable {
    /// Fields of the rarer records (a token file's path, a narrowed token's request, a
    /// `LoadCredential=` delivery's ids), as they are written.
    var metadata: Logger.Metadata = [:]
    /// The released token's fingerprint.
    var fingerprint: TokenFingerprint?
    /// Who asked, as tokend saw it.
    var caller: Caller?
    /// The connection's number (`AUDIT_CONNECTION`).
    var connection: UInt64?

    /// The caller's ids, unit and executable.
    struct Caller: Sendable {
        var uid: UInt32
        var gid: UInt32
        var pid: Int32
        /// The process that wrote the call, when another than the one that connected.
        var senderPID: Int32?
        var unit: String?
        var executable: String?
    }

    /// `AUDIT_METHOD` of a token file's write.
    static let tokenFileMethod = "TokenFile"

    init() {}

    /// `AUDIT_METHOD`: a method of `io.tokend.TokenProvider` by its short name
    /// (`ProvideTokenReplacement`), anything else as it is.
    static func methodName(_ method: String) -> String {
        let interface = "io.tokend.TokenProvider."
        return method.hasPrefix(interface) ? String(method.dropFirst(interface.count)) : method
    }

    init(fingerprint: TokenFingerprint) {
        self.fingerprint = fingerprint
    }

    /// The caller's ids, and its unit and executable as tokend sees them now: from the facts a
    /// program reader had read for this call, or read from `/proc` for this record (a caller
    /// without a pidfd: no credential has a program reader, or the kernel is older than 6.5).
    /// A fact tokend cannot read (another user's executable, without the rights of ptrace; a
    /// process that has exited) is left out.
    mutating func addCaller(_ caller: CallerIdentity) {
        var sender: Int32?
        if case .anotherProcess(let pid, _) = caller.sender { sender = pid }
        let (unit, executable) = Self.program(of: caller)
        self.caller = Caller(uid: caller.uid, gid: caller.gid, pid: caller.pid, senderPID: sender, unit: unit, executable: executable)
    }

    /// Every field of the record but those of its kind (``AuditTrail`` adds them).
    var fields: Logger.Metadata {
        var fields = metadata
        if let fingerprint {
            fields["audit_token_sha256"] = .string(fingerprint.sha256)
            if let jti = fingerprint.jti { fields["audit_token_jti"] = .string(jti) }
        }
        if let caller {
            fields["audit_caller_uid"] = .stringConvertible(caller.uid)
            fields["audit_caller_gid"] = .stringConvertible(caller.gid)
            fields["audit_caller_pid"] = .stringConvertible(caller.pid)
            if let sender = caller.senderPID { fields["audit_sender_pid"] = .stringConvertible(sender) }
            if let unit = caller.unit { fields["audit_caller_unit"] = .string(unit) }
            if let executable = caller.executable { fields["audit_caller_exe"] = .string(executable) }
        }
        if let connection { fields["audit_connection"] = .stringConvertible(connection) }
        return fields
    }

    /// The caller's unit and executable: the facts a program reader's check read for this call,
    /// else `/proc/PID/cgroup` and `/proc/PID/exe` read directly, while the caller's connection is
    /// being answered (the pid could in principle have been reused by a process of the same
    /// moment; the record says what tokend saw).
    static func program(of caller: CallerIdentity) -> (unit: String?, executable: String?) {
        if caller.program != nil, caller.check != 0 {
            // A call checked on its own (program readers are in use): the facts its checks read,
            // through the pidfd, are reused; a process that has exited gives nothing.
            guard case .success(let facts) = caller.programFacts(.executable) else { return (nil, nil) }
            return (facts.unit, facts.executable)
        }
        // Otherwise two reads of /proc, not the program readers' full set (pid namespace, the
        // executable's file, the pidfd's liveness): a connection per call pays this per record.
        guard caller.pid > 0 else { return (nil, nil) }
        let cgroup = try? ProgramIdentity.readSmallFile("/proc/\(caller.pid)/cgroup").get()
        let executable = try? ProgramIdentity.readLink("/proc/\(caller.pid)/exe").get()
        return (cgroup.flatMap(unitsByCgroup.unit(fromCgroup:)), executable)
    }

    /// The units of the cgroups callers were last seen in.
    static let unitsByCgroup = CgroupUnits()
}

/// `ProgramFacts.unit(fromCgroup:)` remembered by the file's text: the callers of a host run in
/// a handful of cgroups, and a connection per call asks for the same one again and again. The
/// answer depends on the text alone, so a remembered one is never stale; the table is emptied
/// when it reaches ``capacity`` (a host that starts a scope per job makes new cgroups all day).
final class CgroupUnits: Sendable {
    /// Texts remembered at most; each is a few hundred bytes.
    static let capacity = 512
    private let units = Mutex<[String: String?]>([:])

    func unit(fromCgroup text: String) -> String? {
        if let known = units.withLock({ $0[text] }) { return known }
        let unit = ProgramFacts.unit(fromCgroup: text)
        units.withLock { units in
            if units.count >= Self.capacity { units.removeAll(keepingCapacity: true) }
            units[text] = .some(unit)
        }
        return unit
    }

    /// How many texts are remembered (tests).
    var count: Int { units.withLock { $0.count } }
}

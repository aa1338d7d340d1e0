import Logging
import TokendCore
import TokendOAuth

/// What an audit record says besides its kind, credential, method and count: who asked and
/// which token, as log metadata (each item becomes a journal field, `audit_caller_uid` →
/// `AUDIT_CALLER_UID`). Built once, at the first release on a connection.
struct AuditRecord: Sendable {
    var metadata: Logger.Metadata = [:]

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
        addFingerprint(fingerprint)
    }

    mutating func addFingerprint(_ fingerprint: TokenFingerprint) {
        metadata["audit_token_sha256"] = .string(fingerprint.sha256)
        if let jti = fingerprint.jti { metadata["audit_token_jti"] = .string(jti) }
    }

    /// The caller's ids, and its unit and executable as tokend sees them now: from the facts a
    /// program reader had read for this call, or read from `/proc` for this record (a caller
    /// without a pidfd: no credential has a program reader, or the kernel is older than 6.5).
    /// A fact tokend cannot read (another user's executable, without the rights of ptrace; a
    /// process that has exited) is left out.
    mutating func addCaller(_ caller: CallerIdentity) {
        metadata["audit_caller_uid"] = .stringConvertible(caller.uid)
        metadata["audit_caller_gid"] = .stringConvertible(caller.gid)
        metadata["audit_caller_pid"] = .stringConvertible(caller.pid)
        if case .anotherProcess(let pid, _) = caller.sender { metadata["audit_sender_pid"] = .stringConvertible(pid) }
        let (unit, executable) = Self.program(of: caller)
        if let unit { metadata["audit_caller_unit"] = .string(unit) }
        if let executable { metadata["audit_caller_exe"] = .string(executable) }
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
        return (cgroup.flatMap { ProgramFacts.unit(fromCgroup: $0) }, executable)
    }
}

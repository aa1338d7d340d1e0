import Logging
import Synchronization
import TokendCore
import TokendOAuth

/// The audit trail: one journal record for every release of a token and every refusal, with a
/// stable `MESSAGE_ID` per kind (``AuditMessageID``), who asked (uid, gid, pid, unit, executable,
/// as tokend saw them), the credential, the method, the token's fingerprint
/// (``TokenFingerprint``, never the token) and the result.
///
/// Records go through the daemon's logger, with a level of their own (`info`), so that they are
/// written whatever `daemon.log_level` says: under systemd each metadata item is its own journal
/// field (``JournalFields``); elsewhere they are lines on standard error. Calls on a connection are
/// de-duplicated by ``ConnectionAudit``.
final class AuditTrail: Sendable {
    private let logger: Logger
    private let enabledFlag: Atomic<Bool>
    private let connectionNumbers = Atomic<UInt64>(0)

    /// - Parameters:
    ///   - logger: The daemon's logger.
    ///   - enabled: `audit.enabled`.
    init(logger: Logger, enabled: Bool) {
        var logger = logger
        // An audit record is not a diagnostic: `log_level = "warning"` must not silence it.
        logger.logLevel = .info
        self.logger = logger
        enabledFlag = Atomic(enabled)
    }

    /// A trail that records nothing (tests of other parts, tools).
    static let disabled = AuditTrail(logger: Logger(label: "tokend.audit", factory: { _ in SwiftLogNoOpLogHandler() }), enabled: false)

    /// Whether releases and refusals are recorded (`audit.enabled`; a reload changes it).
    var isEnabled: Bool { enabledFlag.load(ordering: .relaxed) }

    /// Applies `audit.enabled` from a reloaded configuration.
    func setEnabled(_ enabled: Bool) { enabledFlag.store(enabled, ordering: .relaxed) }

    /// The audit of a new connection from `caller`, numbered for the records (`AUDIT_CONNECTION`).
    func connection(of caller: CallerIdentity) -> ConnectionAudit {
        ConnectionAudit(trail: self, caller: caller, number: connectionNumbers.add(1, ordering: .relaxed).newValue)
    }

    /// Writes one record of a tally (``ConnectionAudit``, token files, `LoadCredential=`).
    func write(_ action: AuditTally<AuditRecord>.Action) {
        switch action {
        case .first(let key, let record): write(key, record, count: 1)
        case .total(let key, let record, let count): write(key, record, count: count)
        }
    }

    private func write(_ key: AuditTally<AuditRecord>.Key, _ record: AuditRecord, count: Int) {
        var metadata = record.fields
        metadata["message_id"] = .string(AuditMessageID.of(key.outcome))
        metadata["audit_result"] = .string(key.outcome.rawValue)
        metadata["user_identifier"] = .string(key.credential)
        metadata["audit_method"] = .string(AuditRecord.methodName(key.method))
        metadata["audit_count"] = .stringConvertible(count)
        if key.outcome == .refused { metadata["audit_reason"] = .string(key.detail) }
        logger.info(key.outcome == .released ? "token released" : "token refused", metadata: metadata)
    }

    /// A token file was written with `entry`'s token (tokend itself is the writer; whoever may
    /// read the file reads it from there, which the file's mode decides).
    func tokenFileWritten(_ entry: ViewEntry, path: String) {
        guard isEnabled, let fingerprint = entry.fingerprint else { return }
        let key = AuditTally<AuditRecord>.Key(
            outcome: .released, credential: entry.userIdentifier, method: AuditRecord.tokenFileMethod, detail: fingerprint.sha256)
        var record = AuditRecord(fingerprint: fingerprint)
        record.metadata["audit_path"] = .string(path)
        write(.first(key, record))
    }

    /// A delivery of a credential's token outside the socket's calls (`LoadCredential=`), or its
    /// refusal: one record each (one connection is one delivery).
    ///
    /// - Parameters:
    ///   - credential: The credential (user identifier) asked for; `-` when the request named none.
    ///   - method: What delivered it, e.g. `LoadCredential`.
    ///   - unit: The unit tokend found the connecting process in, if it looked.
    ///   - uid: The connecting process's uid (`SO_PEERCRED`).
    ///   - pid: Its pid.
    ///   - fingerprint: The delivered token's; `nil` for a refusal.
    ///   - refusal: Why nothing was delivered; `nil` for a delivery.
    ///   - extra: More fields (e.g. `audit_credential_id`).
    func delivery(
        credential: String, method: String, unit: String?, uid: UInt32, pid: Int32, fingerprint: TokenFingerprint?, refusal: String?,
        extra: Logger.Metadata = [:]
    ) {
        guard isEnabled else { return }
        var record = fingerprint.map(AuditRecord.init(fingerprint:)) ?? AuditRecord()
        record.metadata["audit_caller_uid"] = .stringConvertible(uid)
        record.metadata["audit_caller_pid"] = .stringConvertible(pid)
        // The unit the caller's checks found; the executable is the service manager's.
        if let unit { record.metadata["audit_caller_unit"] = .string(unit) }
        if let executable = AuditRecord.program(of: CallerIdentity(uid: uid, gid: 0, pid: pid)).executable {
            record.metadata["audit_caller_exe"] = .string(executable)
        }
        record.metadata.merge(extra) { _, new in new }
        let key: AuditTally<AuditRecord>.Key
        if let fingerprint, refusal == nil {
            key = .init(outcome: .released, credential: credential, method: method, detail: fingerprint.sha256)
        } else {
            key = .init(outcome: .refused, credential: credential, method: method, detail: refusal ?? "refused")
        }
        write(.first(key, record))
    }
}

/// The catalogue ids of the audit records (`MESSAGE_ID=`), one per kind; made once with
/// `systemd-id128 new` and never changed: queries and alerts depend on them.
enum AuditMessageID {
    /// A token left tokend: a call's reply, a `Watch` update, a token file, a `LoadCredential=`.
    static let released = "52708dab149a40cd9828dcaa8cc14222"
    /// A token was asked for and refused (not a reader, no such credential, the login ended).
    static let refused = "37506a5cbb314d1fabed871e2c249211"

    static func of(_ outcome: AuditTally<AuditRecord>.Outcome) -> String {
        switch outcome {
        case .released: released
        case .refused: refused
        }
    }
}

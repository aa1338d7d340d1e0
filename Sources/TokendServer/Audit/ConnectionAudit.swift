import Synchronization
import TokendCore
import TokendOAuth

/// The audit of one connection: carries out its ``AuditTally``. The first release of a token
/// (and the first refusal of a kind) is recorded at once; repeats are counted under an
/// uncontended lock, and their totals are recorded at ``close()`` or when the token changes.
///
/// Used from the connection's event loop and from the tasks of its deferred calls.
///
/// A record is written at once, before the reply: the caller's `/proc` facts are read while the
/// caller surely lives (a one-shot client exits as soon as it has its reply), and a release is
/// on record before the token has left.
final class ConnectionAudit: Sendable {
    private let trail: AuditTrail
    private let tally = Mutex(AuditTally<AuditRecord>())
    /// The connection's number in this daemon's life (`AUDIT_CONNECTION`): the first record and
    /// the total of the same token share it.
    let number: UInt64

    init(trail: AuditTrail, caller: CallerIdentity, number: UInt64) {
        self.trail = trail
        self.number = number
    }

    /// `entry`'s token was released to `caller` through `method`.
    func released(_ entry: ViewEntry, to caller: CallerIdentity, method: String) {
        guard trail.isEnabled, let fingerprint = entry.fingerprint else { return }
        note(.init(outcome: .released, credential: entry.userIdentifier, method: method, detail: fingerprint.sha256)) {
            var record = AuditRecord(fingerprint: fingerprint)
            record.addCaller(caller)
            return record
        }
    }

    /// A narrowed token of `user` (for `narrowing`) was released to `caller`.
    func released(_ narrowed: NarrowedServing, of user: String, narrowing: TokenNarrowing, to caller: CallerIdentity, method: String) {
        guard trail.isEnabled else { return }
        let fingerprint = narrowed.fingerprint
        note(.init(outcome: .released, credential: user, method: method, variant: narrowing.key, detail: fingerprint.sha256)) {
            var record = AuditRecord(fingerprint: fingerprint)
            record.addCaller(caller)
            if let scope = narrowing.scopeValues { record.metadata["audit_scope"] = .string(scope.joined(separator: " ")) }
            if let resource = narrowing.resource { record.metadata["audit_resource"] = .string(resource) }
            return record
        }
    }

    /// `caller` asked `method` for `user`'s token and was refused, for `reason`.
    func refused(_ user: String, to caller: CallerIdentity, method: String, reason: String) {
        guard trail.isEnabled else { return }
        note(.init(outcome: .refused, credential: user, method: method, detail: reason)) {
            var record = AuditRecord()
            record.addCaller(caller)
            return record
        }
    }

    /// The connection closed: the totals of what it was given more than once.
    func close() {
        for action in tally.withLock({ $0.close() }) { trail.write(action) }
    }

    private func note(_ key: AuditTally<AuditRecord>.Key, record: () -> AuditRecord) {
        // A repeat costs one uncontended lock and a lookup; only a new key builds its record (a
        // read of /proc at most), under the lock of this connection alone.
        let actions = tally.withLock { tally in
            tally.note(key) {
                var built = record()
                built.connection = number
                return built
            }
        }
        for action in actions { trail.write(action) }
    }
}

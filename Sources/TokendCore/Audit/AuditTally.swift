/// Which audit records one connection writes: the de-duplication of the audit trail, as a pure
/// type (the connection carries out its actions).
///
/// A connection that reads the same token many times (a client library's persistent
/// connection, a `Watch`) would otherwise write a record per call and slow the cached path.
/// The first release of a token to a connection, for a credential and a method, is recorded at
/// once (a connection can live for days, and the daemon can be killed: the record must not wait
/// for the close); every later one is only counted, and the count is recorded when the
/// connection closes or the credential's token changes on it, if it was released more than
/// once. Refusals are counted the same way per credential, method and reason, so a client
/// retrying a refused call in a loop writes two records, not thousands.
public struct AuditTally<Record: Sendable>: Sendable {
    /// What a record is about: one credential's token (or refusal) through one method.
    public struct Key: Hashable, Sendable {
        /// Released or refused.
        public var outcome: Outcome
        /// The credential (user identifier).
        public var credential: String
        /// The Varlink method, or a name such as `TokenFile` for releases that are no call.
        public var method: String
        /// Which of the credential's tokens: empty for its own, the request (scope, resource) for
        /// a narrowed one.
        public var variant: String
        /// Released: the token's fingerprint (``TokenFingerprint``-like text); refused: the reason.
        public var detail: String

        public init(outcome: Outcome, credential: String, method: String, variant: String = "", detail: String) {
            self.outcome = outcome
            self.credential = credential
            self.method = method
            self.variant = variant
            self.detail = detail
        }
    }

    /// Whether a token left tokend or was refused.
    public enum Outcome: String, Sendable, Hashable {
        case released
        case refused
    }

    /// A record to write, with what was known of it when it was first noted (who called, the
    /// token's fingerprint).
    public enum Action: Sendable {
        /// The first release or refusal of `key` on the connection: its count is 1.
        case first(Key, Record)
        /// `key` happened `count` times in all on the connection (the first included), written when
        /// the connection closes or the token changes.
        case total(Key, Record, count: Int)
    }

    private var counts: [Key: (order: Int, count: Int, record: Record)] = [:]
    private var nextOrder = 0

    public init() {}

    /// Notes one release or refusal of `key`.
    ///
    /// - Parameters:
    ///   - key: What happened.
    ///   - record: What to record about it; called only for a key not seen before.
    /// - Returns: The records to write now: `.first` for a key not seen on the connection before,
    ///   preceded by the `.total` of any earlier token of the same credential and method released
    ///   more than once (the token changed); nothing for a repeat (the hot path).
    public mutating func note(_ key: Key, record: () -> Record) -> [Action] {
        if let index = counts.index(forKey: key) {
            counts.values[index].count += 1
            return []
        }
        var actions: [Action] = []
        if key.outcome == .released {
            // Another token of the same credential through the same method: that one is over.
            let replaced = counts.filter {
                $0.key.outcome == .released && $0.key.credential == key.credential && $0.key.method == key.method
                    && $0.key.variant == key.variant
            }
            for (old, value) in replaced.sorted(by: { $0.value.order < $1.value.order }) {
                counts[old] = nil
                if value.count > 1 { actions.append(.total(old, value.record, count: value.count)) }
            }
        }
        let first = record()
        counts[key] = (nextOrder, 1, first)
        nextOrder += 1
        actions.append(.first(key, first))
        return actions
    }

    /// The connection closed: the totals of every key noted more than once, in the order they
    /// were first noted; the tally is empty afterwards.
    public mutating func close() -> [Action] {
        defer { counts.removeAll() }
        return counts.filter { $0.value.count > 1 }.sorted { $0.value.order < $1.value.order }.map {
            .total($0.key, $0.value.record, count: $0.value.count)
        }
    }

    /// How many keys the tally holds (one per credential, method and token or reason).
    public var keyCount: Int { counts.count }
}

import Dispatch
import GRDB
import Synchronization

/// Commits the store's writes in groups: writes submitted while another group is waiting for
/// the writer join it, and each group is one transaction with (at most) one fsync.
///
/// Every write runs in its own savepoint inside the group's transaction, so one write failing
/// (a compare-and-swap conflict, say) rolls back only itself; if the commit fails, every write
/// of the group fails with that error. A write returns only after its group committed, so the
/// durability contract of ``CredentialStore`` holds per write.
///
/// A write may also say how long it is willing to wait for company (`grouping`): the group is
/// then sent to the writer when its most impatient member's wait is over, not at once. Grants
/// nobody is waiting for use this during a refresh storm, where results arrive a few
/// milliseconds apart: committed one by one, each pays a transaction, an fsync and two thread
/// wake-ups; committed in groups, a group pays them once.
final class GroupCommit: Sendable {
    /// One write waiting for its group.
    struct Member: Sendable {
        /// Whether this write must be fsynced before it returns.
        var durable: Bool
        /// Runs the write in its savepoint and keeps its result.
        var run: @Sendable (Database) -> Void
        /// Resumes the writer's caller: with the group's commit error, or its own result.
        var finish: @Sendable ((any Error)?) -> Void
    }

    private struct State {
        var members: [Member] = []
        /// A group has been handed to the writer and has not started yet: later members join it.
        var sentToWriter = false
        /// When the waiting group is due, if it is lingering.
        var dueAt: DispatchTime?
    }

    private let pool: DatabasePool
    private let state = Mutex(State())

    init(pool: DatabasePool) { self.pool = pool }

    /// Adds a write to the next group.
    ///
    /// - Parameter grouping: How long the write may wait for others; `.zero` sends the group now.
    func submit(_ member: Member, grouping: Duration) {
        let dueAt: DispatchTime = grouping > .zero ? .now() + .nanoseconds(Int(grouping.nanoseconds)) : .now()
        enum Action { case none, sendNow, sendAt(DispatchTime) }
        let action = state.withLock { state -> Action in
            state.members.append(member)
            if state.sentToWriter { return .none }
            if let current = state.dueAt, current <= dueAt { return .none }
            state.dueAt = dueAt
            if grouping <= .zero {
                state.sentToWriter = true
                return .sendNow
            }
            return .sendAt(dueAt)
        }
        switch action {
        case .none: break
        case .sendNow: sendToWriter()
        case .sendAt(let deadline):
            DispatchQueue.global().asyncAfter(deadline: deadline) { [self] in self.sendIfDue(deadline) }
        }
    }

    /// The timer of a lingering group: sends it unless an earlier send took care of it.
    private func sendIfDue(_ deadline: DispatchTime) {
        let send = state.withLock { state -> Bool in
            guard !state.sentToWriter, !state.members.isEmpty, let due = state.dueAt, due <= deadline else { return false }
            state.sentToWriter = true
            return true
        }
        if send { sendToWriter() }
    }

    private func sendToWriter() {
        pool.asyncWriteWithoutTransaction { [self] db in
            let group = state.withLock { state -> [Member] in
                defer {
                    state.members = []
                    state.sentToWriter = false
                    state.dueAt = nil
                }
                return state.members
            }
            guard !group.isEmpty else { return }
            let failure = Self.commit(group, db)
            for member in group { member.finish(failure) }
        }
    }

    /// Runs a group in one transaction; the commit's error, if any.
    private static func commit(_ group: [Member], _ db: Database) -> (any Error)? {
        do {
            // Set per group, so no level outlives the group that wanted it.
            let durable = group.contains { $0.durable }
            try db.cachedStatement(sql: durable ? "PRAGMA synchronous = FULL" : "PRAGMA synchronous = NORMAL").execute()
            try db.inTransaction(.immediate) {
                for member in group { member.run(db) }
                return .commit
            }
            return nil
        } catch {
            return error
        }
    }

    /// A member for `body`, whose result reaches `continuation` once the group is committed.
    static func member<T: Sendable>(
        durable: Bool, body: @escaping @Sendable (Database) throws -> T, continuation: CheckedContinuation<T, any Error>
    ) -> Member {
        let outcome = OutcomeBox<T>()
        return Member(
            durable: durable,
            run: { db in
                let result = Result<T, any Error> {
                    var value: T?
                    try db.inSavepoint {
                        value = try body(db)
                        return .commit
                    }
                    return value!
                }
                outcome.result.withLock { $0 = result }
            },
            finish: { commitError in
                if let commitError {
                    continuation.resume(throwing: commitError)
                } else {
                    // `run` always ran when the commit succeeded.
                    continuation.resume(with: outcome.result.withLock { $0 } ?? .failure(CancellationError()))
                }
            }
        )
    }
}

/// A member's result, between its savepoint and the group's commit.
private final class OutcomeBox<T: Sendable>: Sendable {
    let result = Mutex<Result<T, any Error>?>(nil)
}

extension Duration {
    fileprivate var nanoseconds: Int64 {
        let (seconds, attoseconds) = components
        return seconds * 1_000_000_000 + attoseconds / 1_000_000_000
    }
}

import Dispatch
import GRDB
import Synchronization

/// Commits the store's writes in groups: writes submitted while another group is waiting for
/// the writer join it, and each group is one transaction with (at most) one fsync.
///
/// A write that fails (a compare-and-swap conflict, say) changes nothing that the others commit:
/// a write that makes several changes runs in its own savepoint, which its failure rolls back; a
/// write whose only change is one statement needs none (see ``Member/savepoint``). If the commit
/// fails, every write of the group fails with that error. A write returns only after its group
/// committed, so the durability contract of ``CredentialStore`` holds per write.
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
        /// Whether the write runs in a savepoint of its own. Not needed when its only change is
        /// a single statement, made last: a statement that fails is undone by SQLite itself (or,
        /// after an I/O error, the whole transaction is, and the commit fails), and a check that
        /// throws after an `UPDATE` matched no row leaves nothing to undo. A savepoint costs two
        /// statements per write, about a tenth of the writer's work in a refresh storm.
        var savepoint: Bool
        /// Runs the write (in its savepoint, if it has one) and keeps its result.
        var run: @Sendable (Database) -> Void
        /// Resumes the writer's caller: with the group's commit error, or its own result.
        var finish: @Sendable ((any Error)?) -> Void
    }

    private struct State {
        var members: [Member] = []
        /// A group has been handed to the writer and has not started yet: later members join it.
        var sentToWriter = false
        /// When the waiting group is due.
        var dueAt: DispatchTime?
        /// The writer is waiting for `dueAt` on `wakeUp`; a member that brings the due time
        /// forward signals it (once, clearing this).
        var writerLingers = false
    }

    private let pool: DatabasePool
    private let generations: GenerationCounter
    private let state = Mutex(State())
    /// Ends a lingering writer's wait early. The writer waits on it itself, on its own queue,
    /// rather than behind a Dispatch timer: a timer per group cost a manager-thread wake-up
    /// and an extra queue hop, ~3 % of a refresh storm's CPU (the semaphore costs half that).
    private let wakeUp = DispatchSemaphore(value: 0)

    /// - Parameters:
    ///   - pool: The database; groups run on its writer.
    ///   - generations: The store's generation counter, saved once per group before its commit.
    init(pool: DatabasePool, generations: GenerationCounter) {
        self.pool = pool
        self.generations = generations
    }

    /// How many writes wait for the writer to take their group.
    var waitingCount: Int { state.withLock { $0.members.count } }

    /// Adds a write to the next group.
    ///
    /// - Parameter grouping: How long the write may wait for others; `.zero` sends the group now.
    func submit(_ member: Member, grouping: Duration) {
        let dueAt: DispatchTime = grouping > .zero ? .now() + .nanoseconds(Int(grouping.nanoseconds)) : .now()
        enum Action { case none, send, wakeWriter }
        let action = state.withLock { state -> Action in
            state.members.append(member)
            if let current = state.dueAt, current <= dueAt { return .none }
            state.dueAt = dueAt
            if !state.sentToWriter {
                state.sentToWriter = true
                return .send
            }
            if state.writerLingers {
                state.writerLingers = false
                return .wakeWriter
            }
            return .none
        }
        switch action {
        case .none: break
        case .send: sendToWriter()
        case .wakeWriter: wakeUp.signal()
        }
    }

    /// Hands the next group to the writer, which waits there until the group is due (members
    /// keep joining meanwhile), then commits it.
    private func sendToWriter() {
        pool.asyncWriteWithoutTransaction { [self] db in
            lingerUntilDue()
            let group = state.withLock { state -> [Member] in
                defer {
                    state.members = []
                    state.sentToWriter = false
                    state.dueAt = nil
                }
                return state.members
            }
            guard !group.isEmpty else { return }
            let failure = Self.commit(group, db, generations: generations)
            for member in group { member.finish(failure) }
        }
    }

    /// On the writer: waits until the group's due time, which later members may bring forward.
    private func lingerUntilDue() {
        while true {
            let deadline = state.withLock { state -> DispatchTime? in
                guard let due = state.dueAt, due > .now() else { return nil }
                state.writerLingers = true
                return due
            }
            guard let deadline else { return }
            if wakeUp.wait(timeout: deadline) == .timedOut {
                let signalled = state.withLock { state -> Bool in
                    defer { state.writerLingers = false }
                    return !state.writerLingers
                }
                // A member cleared the flag just as the wait timed out: its signal is on its
                // way; take it, so that it cannot cut the next group's wait short.
                if signalled { wakeUp.wait() }
            }
        }
    }

    /// Runs a group in one transaction; the commit's error, if any.
    private static func commit(_ group: [Member], _ db: Database, generations: GenerationCounter) -> (any Error)? {
        var committed = false
        defer { generations.groupEnded(committed: committed) }
        do {
            // Set per group, so no level outlives the group that wanted it.
            let durable = group.contains { $0.durable }
            try db.cachedStatement(sql: durable ? "PRAGMA synchronous = FULL" : "PRAGMA synchronous = NORMAL").execute()
            try db.inTransaction(.immediate) {
                // After some errors (a full disk, an I/O error) SQLite rolls the whole transaction
                // back; GRDB then refuses the group's later statements (SQLITE_ABORT), so no
                // write of the group can commit on its own, with or without a savepoint.
                for member in group { member.run(db) }
                try generations.save(db)
                return .commit
            }
            committed = true
            return nil
        } catch {
            return error
        }
    }

    /// A member for `body`, whose result reaches `continuation` once the group is committed.
    static func member<T: Sendable>(
        durable: Bool, savepoint: Bool, body: @escaping @Sendable (Database) throws -> T,
        continuation: CheckedContinuation<T, any Error>
    ) -> Member {
        let outcome = OutcomeBox<T>()
        return Member(
            durable: durable,
            savepoint: savepoint,
            run: { db in
                let result = Result<T, any Error> {
                    guard savepoint else { return try body(db) }
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

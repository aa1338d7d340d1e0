import GRDB
import Synchronization

/// The store-wide generation counter of a ``SQLiteCredentialStore``, kept in memory by the
/// writer and saved to `meta.last_generation` once per committed group instead of once per write.
///
/// Every generation handed out is greater than every one handed out before, in this process
/// (the counter only grows) and across restarts: a group's rows and the counter's new value are
/// saved in the same transaction, so a committed row's generation never exceeds the saved
/// counter, which is where the next process starts. A generation taken by a write that fails or
/// rolls back is simply never used (gaps are allowed; only order matters).
///
/// Used only from inside write transactions, which the writer connection serialises; the mutex
/// keeps it sound for the type system, never contended.
final class GenerationCounter: Sendable {
    private struct State {
        /// The last generation handed out; nil until first read from `meta`.
        var last: Int64?
        /// The value `meta` holds as of the last committed group, if known.
        var saved: Int64?
        /// The value this group's transaction wrote to `meta`, committed or not yet.
        var writing: Int64?
    }

    private let state = Mutex(State())

    init() {}

    /// The next generation.
    func next(_ db: Database) throws -> Int64 {
        try reserve(db, count: 1).upperBound
    }

    /// `count` consecutive new generations.
    func reserve(_ db: Database, count: Int) throws -> ClosedRange<Int64> {
        let seed = try state.withLock { $0.last } == nil ? Self.readSaved(db) : nil
        return state.withLock { state in
            if let seed {
                state.last = seed
                state.saved = seed
            }
            let first = state.last! + 1
            state.last = state.last! + Int64(max(1, count))
            return first...state.last!
        }
    }

    /// Writes the counter to `meta` if this group took generations; called just before the
    /// group's commit.
    func save(_ db: Database) throws {
        guard
            let value = state.withLock({ state -> Int64? in
                guard let last = state.last, last != state.saved else { return nil }
                state.writing = last
                return last
            })
        else { return }
        try db.cachedStatement(sql: "UPDATE meta SET value = ? WHERE key = 'last_generation'").execute(arguments: [value])
    }

    /// The group's transaction ended: if it committed, `meta` now holds what ``save(_:)`` wrote;
    /// if not, it still holds the old value and the next group writes the counter again.
    func groupEnded(committed: Bool) {
        state.withLock { state in
            if committed, let writing = state.writing { state.saved = writing }
            state.writing = nil
        }
    }

    private static func readSaved(_ db: Database) throws -> Int64 {
        guard let value = try Int64.fetchOne(db.cachedStatement(sql: "SELECT value FROM meta WHERE key = 'last_generation'")) else {
            throw StorageError(code: .corruptRecord, message: "the meta table has no generation counter")
        }
        return value
    }
}

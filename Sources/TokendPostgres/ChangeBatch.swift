import Synchronization
import TokendStorage

/// Credential changes announced by other nodes, gathered while the previous ones are applied, so
/// that a node applies them in batches: in a refresh wave the fleet announces thousands of
/// changes a second, and reloading each credential in a query of its own, with a write of the
/// node's floors of its own, fell behind (the node's view lagged, and it began grants other
/// nodes had already made).
///
/// Per credential only the latest change counts: a generation, or nil when it was removed.
/// Changes of one credential arrive in commit order, so the latest is the newest.
typealias ChangeBatch = NewsBatch<Int64?>

/// Leases other nodes took, gathered the same way (``PostgresRefreshCoordination/receive(_:into:leases:)``).
typealias LeaseNews = NewsBatch<LeaseHolder>

/// News about credentials from the other nodes, per credential the latest, handed to one
/// consumer in bounded batches while more arrives.
final class NewsBatch<News: Sendable>: Sendable {
    private struct State {
        var pending: [String: News] = [:]
        /// Taken by ``next(limit:)`` and not yet ``applied(_:)``.
        var applying: Set<String> = []
        var waiter: CheckedContinuation<Void, Never>?
        var finished = false
    }

    private let state = Mutex(State())

    /// Records news of `user`, replacing any not yet taken.
    func add(_ user: String, _ news: News) {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            state.pending[user] = news
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume()
    }

    /// Whether a change of `user` waits to be applied, or is being applied.
    func isPending(_ user: String) -> Bool { state.withLock { $0.pending[user] != nil || $0.applying.contains(user) } }

    /// The batch `next(limit:)` returned has been applied.
    func applied(_ changes: [String: News]) {
        state.withLock { state in
            for user in changes.keys { state.applying.remove(user) }
        }
    }

    /// No more changes will come (the connection ended); ``next(limit:)`` then returns what is
    /// left and nil after it.
    func finish() {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            state.finished = true
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume()
    }

    /// Waits for changes and takes up to `limit` of them, or nil once finished and empty; the
    /// caller says when it has ``applied(_:)`` them. One consumer at a time.
    func next(limit: Int) async -> [String: News]? {
        // Bounded: each pass either takes changes, ends, or waits for an add or a finish.
        while true {
            let taken = state.withLock { state -> [String: News]?? in
                if !state.pending.isEmpty {
                    var batch: [String: News] = [:]
                    if state.pending.count <= limit {
                        batch = state.pending
                        state.pending = [:]
                    } else {
                        for key in Array(state.pending.keys.prefix(limit)) { batch[key] = state.pending.removeValue(forKey: key) }
                    }
                    state.applying.formUnion(batch.keys)
                    return .some(batch)
                }
                return state.finished ? .some(nil) : nil
            }
            if let taken { return taken }
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let resumeNow = state.withLock { state -> Bool in
                    guard state.pending.isEmpty, !state.finished else { return true }
                    state.waiter = continuation
                    return false
                }
                if resumeNow { continuation.resume() }
            }
        }
    }
}

extension NewsBatch where News == Int64? {
    /// Records a change of `user`: its new generation, or nil when it was removed.
    func add(_ user: String, generation: Int64?) { add(user, generation) }
}

import Synchronization

/// Tells waiters that something changed, without saying what: a generation number and the
/// tasks waiting for it to move. Used for `STATUS=` and the metrics file, which re-read the
/// view after any change, so bursts of changes coalesce into one update.
final class ChangeSignal: Sendable {
    private struct State {
        var generation: UInt64 = 0
        var nextWaiter: UInt64 = 0
        var waiters: [UInt64: CheckedContinuation<UInt64, Never>] = [:]
    }

    private let state = Mutex(State())

    /// The current generation.
    var generation: UInt64 { state.withLock { $0.generation } }

    /// Records a change and wakes every waiter. Cheap when nobody waits.
    func signal() {
        let (generation, waiters) = state.withLock { state -> (UInt64, [CheckedContinuation<UInt64, Never>]) in
            state.generation &+= 1
            guard !state.waiters.isEmpty else { return (state.generation, []) }
            defer { state.waiters = [:] }
            return (state.generation, Array(state.waiters.values))
        }
        for waiter in waiters { waiter.resume(returning: generation) }
    }

    /// Waits until the generation differs from `seen`, or the task is cancelled.
    ///
    /// - Returns: The generation when it returned.
    func wait(after seen: UInt64) async -> UInt64 {
        let id = state.withLock { state -> UInt64 in
            state.nextWaiter &+= 1
            return state.nextWaiter
        }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<UInt64, Never>) in
                let now = state.withLock { state -> UInt64? in
                    if state.generation != seen || Task.isCancelled { return state.generation }
                    state.waiters[id] = continuation
                    return nil
                }
                if let now { continuation.resume(returning: now) }
            }
        } onCancel: {
            let waiter = state.withLock { state -> (CheckedContinuation<UInt64, Never>, UInt64)? in
                state.waiters.removeValue(forKey: id).map { ($0, state.generation) }
            }
            if let (continuation, generation) = waiter { continuation.resume(returning: generation) }
        }
    }
}

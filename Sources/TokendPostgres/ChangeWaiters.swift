import Synchronization
import TokendCore

/// Tasks waiting for news about one credential, each resumed exactly once: by ``signal(_:)`` or
/// when its own deadline passes.
final class ChangeWaiters: Sendable {
    private struct State {
        var next = 0
        var waiting: [String: [Int: CheckedContinuation<Void, Never>]] = [:]
    }

    private let state = Mutex(State())

    /// Waits for a signal about `user`, at most `limit` (or until the task is cancelled).
    func wait(for user: String, atMost limit: Duration) async {
        guard limit > .zero else { return }
        await withTaskGroup(of: Void.self) { group in
            group.addTask { try? await Task.sleep(for: limit) }
            group.addTask { await self.waitForSignal(user) }
            await group.next()
            group.cancelAll()
        }
    }

    private func waitForSignal(_ user: String) async {
        let id = state.withLock { state in
            state.next += 1
            return state.next
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                state.withLock { state in state.waiting[user, default: [:]][id] = continuation }
                // A cancellation that came before the registration found nothing to resume.
                if Task.isCancelled { resume(user, id) }
            }
        } onCancel: {
            resume(user, id)
        }
    }

    /// Resumes every task waiting for `user`.
    func signal(_ user: String) {
        let continuations = state.withLock { state in state.waiting.removeValue(forKey: user) ?? [:] }
        for continuation in continuations.values { continuation.resume() }
    }

    private func resume(_ user: String, _ id: Int) {
        let continuation = state.withLock { state -> CheckedContinuation<Void, Never>? in
            let found = state.waiting[user]?.removeValue(forKey: id)
            if state.waiting[user]?.isEmpty == true { state.waiting[user] = nil }
            return found
        }
        continuation?.resume()
    }
}

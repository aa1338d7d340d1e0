import Synchronization

/// Waits for a task at most a given time.
///
/// Cancelling a task only asks it to stop: a postgres-nio operation (or the client's `run()`)
/// that does not honour cancellation would hold its awaiter forever, and with it a caller's
/// reply or the daemon's stop. Every store operation and `close()` waits through this, so each
/// returns within its limit; a task that overstays is left to finish in the background.
enum BoundedWait {
    /// `task`'s result, or nil if it has not finished within `limit`.
    static func result<Success: Sendable, Failure: Error>(
        of task: Task<Success, Failure>, within limit: Duration
    ) async -> Result<Success, Failure>? {
        let gate = Gate<Result<Success, Failure>?>()
        // Not cancelled when the limit comes first: it keeps waiting for the task, and then
        // opens a gate that is already open.
        Task { gate.open(await task.result) }
        let timer = Task {
            try? await Task.sleep(for: limit)
            gate.open(nil)
        }
        let outcome = await gate.wait()
        timer.cancel()
        return outcome
    }
}

/// Opened once with a value; the one waiter gets it whether it came before or after.
private final class Gate<Value: Sendable>: Sendable {
    private enum State {
        case empty
        case waiting(CheckedContinuation<Value, Never>)
        case open(Value)
        case done
    }

    private let state = Mutex(State.empty)

    func open(_ value: Value) {
        let waiter = state.withLock { state -> CheckedContinuation<Value, Never>? in
            switch state {
            case .empty:
                state = .open(value)
                return nil
            case .waiting(let continuation):
                state = .done
                return continuation
            case .open, .done:
                return nil
            }
        }
        waiter?.resume(returning: value)
    }

    func wait() async -> Value {
        await withCheckedContinuation { continuation in
            let ready = state.withLock { state -> Value? in
                if case .open(let value) = state {
                    state = .done
                    return value
                }
                state = .waiting(continuation)
                return nil
            }
            if let ready { continuation.resume(returning: ready) }
        }
    }
}

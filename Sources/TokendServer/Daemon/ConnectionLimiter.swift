import Synchronization

/// Counts open connections and refuses new ones beyond the configured maximum.
final class ConnectionLimiter: Sendable {
    private let state: Mutex<(open: Int, maximum: Int, refusedSinceLog: Int)>

    init(maximum: Int) { state = Mutex((0, maximum, 0)) }

    /// Takes a slot; `false` when the limit is reached. The second value is how many refusals to
    /// report in one log line (0 when this refusal should not be logged yet), so a flood of
    /// connections produces a trickle of log lines.
    func tryAcquire() -> (accepted: Bool, refusalsToLog: Int) {
        state.withLock { state in
            if state.open < state.maximum {
                state.open += 1
                return (true, 0)
            }
            state.refusedSinceLog += 1
            // Log the first refusal and then every 1000th.
            if state.refusedSinceLog == 1 || state.refusedSinceLog % 1000 == 0 {
                return (false, state.refusedSinceLog)
            }
            return (false, 0)
        }
    }

    func release() {
        state.withLock { state in
            state.open -= 1
            if state.open < state.maximum / 2 { state.refusedSinceLog = 0 }
        }
    }

    func setMaximum(_ maximum: Int) { state.withLock { $0.maximum = maximum } }

    var openConnections: Int { state.withLock { $0.open } }
}

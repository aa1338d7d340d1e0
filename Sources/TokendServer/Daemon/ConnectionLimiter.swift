import Synchronization

/// Counts open connections and refuses new ones beyond the configured maximum.
final class ConnectionLimiter: Sendable {
    private struct State {
        var open = 0
        var maximum: Int
        var refusedSinceLog = 0
        /// Since start, for metrics.
        var accepted = 0
        var refused = 0
    }

    private let state: Mutex<State>

    init(maximum: Int) { state = Mutex(State(maximum: maximum)) }

    /// Takes a slot; `false` when the limit is reached. The second value is how many refusals to
    /// report in one log line (0 when this refusal should not be logged yet), so a flood of
    /// connections produces a trickle of log lines.
    func tryAcquire() -> (accepted: Bool, refusalsToLog: Int) {
        state.withLock { state in
            if state.open < state.maximum {
                state.open += 1
                state.accepted += 1
                return (true, 0)
            }
            state.refused += 1
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

    /// Changes the limit (reload); connections already open stay open.
    func setMaximum(_ maximum: Int) { state.withLock { $0.maximum = maximum } }

    var openConnections: Int { state.withLock { $0.open } }

    /// Open connections now, and connections accepted and refused since start.
    var totals: (open: Int, accepted: Int, refused: Int) { state.withLock { ($0.open, $0.accepted, $0.refused) } }
}

import Synchronization
import TokendCore

/// Calls that wait for an answer (a refresh, a store write, a login), counted per uid over all
/// connections, so that one user cannot keep the refresh engine and the store busy with
/// thousands of waiting calls (``UserQuotas/callsInFlightPerUID``). Connections already bound a
/// single connection's calls (`max_pipelined_calls`); this bounds a user's connections together.
final class CallsInFlight: Sendable {
    private struct State {
        var counts: [UInt32: Int] = [:]
        /// When each refused uid was last logged: one line a minute per uid.
        var lastReported: [UInt32: ContinuousClock.Instant] = [:]
    }

    private let state = Mutex(State())

    /// Counts a call of `uid`, or returns the quota that refuses it and whether to log it now.
    func begin(uid: UInt32, isAdmin: Bool, quotas: UserQuotas, now: ContinuousClock.Instant = .now) -> (refusal: QuotaRefusal, log: Bool)? {
        state.withLock { state in
            let current = state.counts[uid, default: 0]
            if let refusal = quotas.admitCall(inFlight: current, isAdmin: isAdmin) {
                if let last = state.lastReported[uid], now - last < ConnectionLimiter.reportInterval { return (refusal, false) }
                if state.lastReported.count > 4096 {
                    state.lastReported = state.lastReported.filter { now - $0.value < ConnectionLimiter.reportInterval }
                }
                state.lastReported[uid] = now
                return (refusal, true)
            }
            state.counts[uid] = current + 1
            return nil
        }
    }

    /// A call counted by ``begin(uid:isAdmin:quotas:now:)`` has been answered.
    func end(uid: UInt32) {
        state.withLock { state in
            let left = state.counts[uid, default: 1] - 1
            state.counts[uid] = left > 0 ? left : nil
        }
    }

    /// Calls of `uid` waiting now.
    func count(uid: UInt32) -> Int { state.withLock { $0.counts[uid, default: 0] } }
}

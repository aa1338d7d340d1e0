import Synchronization
import TokendCore

/// Calls that wait for an answer (a refresh, a store write, a login), counted per uid over all
/// connections, so that one user cannot keep the refresh engine and the store busy with
/// thousands of waiting calls (``UserQuotas/callsInFlightPerUID``). Connections already bound a
/// single connection's calls (`max_pipelined_calls`); this bounds a user's connections together.
final class CallsInFlight: Sendable {
    private struct State {
        var counts: [UInt32: Int] = [:]
        /// One log line a minute per refused uid.
        var reports = RefusalReports()
    }

    private let state = Mutex(State())

    /// Counts a call of `uid`, or returns the quota that refuses it and whether to log it now.
    func begin(uid: UInt32, isAdmin: Bool, quotas: UserQuotas, now: ContinuousClock.Instant = .now) -> (refusal: QuotaRefusal, log: Bool)? {
        state.withLock { state in
            let current = state.counts[uid, default: 0]
            if let refusal = quotas.admitCall(inFlight: current, isAdmin: isAdmin) {
                return (refusal, state.reports.record(uid: uid, now: now) > 0)
            }
            state.counts[uid] = current + 1
            return nil
        }
    }

    /// A call counted by ``begin(uid:isAdmin:quotas:now:)`` has been answered.
    func end(uid: UInt32) {
        state.withLock { state in
            state.counts.decrementCount(uid)
        }
    }

    /// Calls of `uid` waiting now.
    func count(uid: UInt32) -> Int { state.withLock { $0.counts[uid, default: 0] } }
}

import Synchronization
import TokendCore

/// Counts open connections, in all and per uid, and admits or refuses new ones by
/// ``UserQuotas/admitConnection(open:openForUID:maximum:isAdmin:)``: `max_connections` for
/// everyone, a share reserved for administrators, and `max_connections_per_uid` for each other
/// user. Watch connections count like any other.
final class ConnectionLimiter: Sendable {
    private struct State {
        var open = 0
        var openByUID: [UInt32: Int] = [:]
        var maximum: Int
        var quotas: UserQuotas
        /// A flood of connections from one uid is one log line a minute.
        var reports = RefusalReports()
        /// Since start, for metrics.
        var accepted = 0
        var refused = 0
    }

    private let state: Mutex<State>

    init(maximum: Int, quotas: UserQuotas = UserQuotas()) { state = Mutex(State(maximum: maximum, quotas: quotas)) }

    /// The administrators' socket's own connections: as many as `reserved_admin_connections`
    /// (at least one), outside `max_connections`; only administrators get that far.
    static func forAdministratorsSocket(quotas: UserQuotas) -> ConnectionLimiter {
        ConnectionLimiter(maximum: administratorsSocketMaximum(quotas), quotas: quotas)
    }

    static func administratorsSocketMaximum(_ quotas: UserQuotas) -> Int { max(1, quotas.reservedAdminConnections) }

    /// The verdict on one connection.
    enum Admission: Equatable {
        case accepted
        /// `report` is how many refusals of this uid to log now (0: not yet, one line a minute).
        case refused(QuotaRefusal, report: Int)
    }

    /// Takes a slot for a connection of `uid`, or says which limit refuses it.
    func admit(uid: UInt32, isAdmin: Bool, now: ContinuousClock.Instant = .now) -> Admission {
        state.withLock { state in
            let mine = state.openByUID[uid, default: 0]
            if let refusal = state.quotas.admitConnection(open: state.open, openForUID: mine, maximum: state.maximum, isAdmin: isAdmin) {
                state.refused += 1
                let count = state.reports.record(uid: uid, now: now)
                return .refused(refusal, report: count)
            }
            state.open += 1
            state.openByUID[uid] = mine + 1
            state.accepted += 1
            return .accepted
        }
    }

    /// Counts a connection of `uid` refused for another reason than a limit (one that may not
    /// use this socket at all).
    ///
    /// - Returns: how many refusals of this uid to log now (0: not yet, one line a minute).
    func recordRefusal(uid: UInt32, now: ContinuousClock.Instant = .now) -> Int {
        state.withLock { state in
            state.refused += 1
            return state.reports.record(uid: uid, now: now)
        }
    }

    /// Gives back the slot of a closed connection of `uid`.
    func release(uid: UInt32) {
        state.withLock { state in
            state.open -= 1
            state.openByUID.decrementCount(uid)
        }
    }

    /// Changes the limits (reload); connections already open stay open.
    func setLimits(maximum: Int, quotas: UserQuotas) {
        state.withLock {
            $0.maximum = maximum
            $0.quotas = quotas
        }
    }

    var openConnections: Int { state.withLock { $0.open } }

    /// Connections `uid` has open now.
    func openConnections(uid: UInt32) -> Int { state.withLock { $0.openByUID[uid, default: 0] } }

    /// Open connections now, and connections accepted and refused since start.
    var totals: (open: Int, accepted: Int, refused: Int) { state.withLock { ($0.open, $0.accepted, $0.refused) } }
}

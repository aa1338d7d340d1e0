import Synchronization
import TokendProtocol

/// Fans re-login warnings out to `WatchReloginWarnings` callers, and keeps the warning in force
/// for each credential so a watcher that connects later is told at once.
///
/// Subscribers filter what they may see themselves (their caller's rights, checked when each
/// warning is delivered) and must not block: they are called on the registry's task.
final class ReloginWarningHub: Sendable {
    typealias Deliver = @Sendable (ReloginWarning) -> Void

    private struct State {
        /// The latest warning said for each credential whose date is still ahead.
        var inForce: [String: ReloginWarning] = [:]
        var subscribers: [UInt64: Deliver] = [:]
        var nextID: UInt64 = 1
    }

    private let state = Mutex(State())

    /// Registers `deliver` for new warnings and returns, atomically with the registration, the
    /// warnings in force now (so none said in between is missed or doubled).
    func subscribe(_ deliver: @escaping Deliver) -> (id: UInt64, inForce: [ReloginWarning]) {
        state.withLock { state in
            let id = state.nextID
            state.nextID += 1
            state.subscribers[id] = deliver
            return (id, state.inForce.values.sorted { $0.userIdentifier < $1.userIdentifier })
        }
    }

    func unsubscribe(_ id: UInt64) {
        _ = state.withLock { $0.subscribers.removeValue(forKey: id) }
    }

    /// Says a new warning: it is in force from now on, and every watcher hears it.
    func say(_ warning: ReloginWarning) {
        let targets = state.withLock { state in
            state.inForce[warning.userIdentifier] = warning
            return Array(state.subscribers.values)
        }
        for deliver in targets { deliver(warning) }
    }

    /// Sets the warning in force for `userIdentifier` without announcing it (start-up, where
    /// it was said before; a new login or the date passing clears it).
    func setInForce(_ userIdentifier: String, _ warning: ReloginWarning?) {
        state.withLock { $0.inForce[userIdentifier] = warning }
    }

    /// The number of open watches.
    var count: Int { state.withLock { $0.subscribers.count } }
}

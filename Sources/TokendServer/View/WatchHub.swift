import NIOCore
import Synchronization

/// What a watcher of one credential hears about.
enum WatchEvent: Sendable {
    /// A new token (refresh, replacement).
    case updated(ViewEntry)
    /// The credential was removed.
    case removed
    /// Only a new login helps now.
    case reauthenticationRequired(reason: String)
}

/// Fans view changes out to `Watch` callers and token files.
///
/// Publishing is a dictionary lookup when nobody watches a credential, so refreshes cost
/// nothing extra. Subscribers are called on their own event loop or queue and must not block:
/// a slow `Watch` client keeps only the latest update (see `VarlinkConnectionHandler`).
final class WatchHub: Sendable {
    struct Subscriber: Sendable {
        let deliver: @Sendable (WatchEvent) -> Void
    }

    private let subscribers = Mutex<[String: [UInt64: Subscriber]]>([:])
    private let nextID = Atomic<UInt64>(1)

    /// Registers `deliver` for changes of `userIdentifier`; returns the id to unsubscribe with.
    func subscribe(_ userIdentifier: String, deliver: @escaping @Sendable (WatchEvent) -> Void) -> UInt64 {
        let id = nextID.wrappingAdd(1, ordering: .relaxed).oldValue
        subscribers.withLock { $0[userIdentifier, default: [:]][id] = Subscriber(deliver: deliver) }
        return id
    }

    func unsubscribe(_ userIdentifier: String, id: UInt64) {
        subscribers.withLock { all in
            all[userIdentifier]?.removeValue(forKey: id)
            if all[userIdentifier]?.isEmpty == true { all.removeValue(forKey: userIdentifier) }
        }
    }

    func publish(_ userIdentifier: String, _ event: WatchEvent) {
        let targets = subscribers.withLock { $0[userIdentifier].map { Array($0.values) } }
        guard let targets else { return }
        for subscriber in targets { subscriber.deliver(event) }
    }

    /// Whether nobody watches anything.
    var isEmpty: Bool { subscribers.withLock { $0.isEmpty } }

    /// Whether anyone watches `userIdentifier`.
    func hasSubscribers(_ userIdentifier: String) -> Bool {
        subscribers.withLock { $0[userIdentifier] != nil }
    }

    var count: Int { subscribers.withLock { $0.values.reduce(0) { $0 + $1.count } } }
}

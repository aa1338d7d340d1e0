import NIOCore
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// How many credentials have a program reader, and the listening sockets that ask the kernel to
/// stamp each write with its writer's pid (`SO_PASSCRED`) while any does.
///
/// Tracing who wrote each call (``CallSenders``) costs the kernel some work on every message of
/// a connection with `SO_PASSCRED` (under a microsecond a round trip on this machine) and tokend
/// a system call per read. Only program readers need it, so a host without them pays nothing:
/// the listening sockets pass credentials only while some credential has a program reader, and
/// a connection accepted meanwhile inherits it. A connection accepted before has no stamps:
/// program readers refuse its calls, and the journal says to reconnect.
final class ProgramReaderPresence: Sendable {
    private let credentials = Atomic<Int>(0)
    /// The listening channels, by identity; each removed when it closes.
    private let listeners = Mutex<[ObjectIdentifier: any Channel]>([:])

    /// Whether any credential has a program reader.
    var isPresent: Bool { credentials.load(ordering: .relaxed) > 0 }

    /// One credential more (`1`) or fewer (`-1`) has a program reader.
    func add(_ change: Int) {
        guard change != 0 else { return }
        let after = credentials.add(change, ordering: .relaxed).newValue
        if (after > 0) != (after - change > 0) { applyToListeners() }
    }

    /// `count` credentials have a program reader (a new view).
    func reset(to count: Int) {
        let before = credentials.exchange(count, ordering: .relaxed)
        if (count > 0) != (before > 0) { applyToListeners() }
    }

    /// Makes `listener`, a listening socket's channel, pass credentials while any credential has
    /// a program reader, from now until it closes. Called on its event loop before it accepts
    /// (the bootstrap's server channel initializer), so that no connection is accepted before.
    func register(listener: any Channel) {
        let key = ObjectIdentifier(listener)
        listeners.withLock { listeners in
            listeners[key] = listener
            // Nothing was queued for this listener yet, so setting it at once keeps the order.
            if listener.eventLoop.inEventLoop {
                try? listener.syncOptions?.setOption(Self.passCredentials, value: isPresent ? 1 : 0)
            } else {
                Self.apply(to: listener, present: isPresent)
            }
        }
        listener.closeFuture.whenComplete { _ in
            _ = self.listeners.withLock { $0.removeValue(forKey: key) }
        }
    }

    /// Sets every listener's `SO_PASSCRED` to the present state. Read and queued under the lock,
    /// and each listener's loop runs what was queued in order: of two changes racing, the one
    /// applied last is the present state.
    private func applyToListeners() {
        listeners.withLock { listeners in
            let present = isPresent
            for listener in listeners.values { Self.apply(to: listener, present: present) }
        }
    }

    private static let passCredentials = ChannelOptions.Types.SocketOption(
        level: .init(rawValue: SOL_SOCKET), name: .init(rawValue: SO_PASSCRED))

    private static func apply(to listener: any Channel, present: Bool) {
        listener.eventLoop.execute {
            try? listener.syncOptions?.setOption(passCredentials, value: present ? 1 : 0)
        }
    }
}

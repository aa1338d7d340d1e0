import NIOCore
import Synchronization

/// Which event loop accepts the next connection: the one accepting now, unless another serves
/// fewer open connections (then the first of those).
///
/// Keeping the current loop on a tie means a lone short connection (a `tokenctl` call) starts
/// and ends on the loop that accepted it, while long-lived connections still spread evenly.
enum AcceptorChoice {
    static func next(open: [Int], current: Int) -> Int {
        precondition(!open.isEmpty, "no event loops")
        let fewest = open.min()!
        return open[current] == fewest ? current : open.firstIndex(of: fewest)!
    }
}

/// Every event loop has a listening channel on the one listening socket, and at most one of them
/// reads (accepts) at a time: the loop ``AcceptorChoice`` names. A connection is served on the
/// loop that accepted it, so it needs no hand-over to another thread before its first byte
/// (NIO's usual server accepts on one loop and passes each connection to the next loop in turn).
///
/// At most one: NIO expects a readable listening socket to yield a connection, which two loops
/// racing for one would break. The turn passes in two steps, each on its loop's own thread: the
/// loop giving it up stops reading, then the next loop starts; meanwhile new connections wait in
/// the socket's backlog.
final class Acceptors: Sendable {
    private struct State {
        var open: [Int]
        var channels: [(any Channel)?]
        /// The loop whose turn it is.
        var owner = 0
        /// The loop whose listening channel reads now, if any.
        var reading: Int?
    }

    let loops: [any EventLoop]
    private let state: Mutex<State>

    init(loops: [any EventLoop]) {
        self.loops = loops
        state = Mutex(State(open: Array(repeating: 0, count: loops.count), channels: Array(repeating: nil, count: loops.count)))
    }

    /// Records the listening channel of `loops[index]` (created with `autoRead` off).
    func add(_ channel: any Channel, loop index: Int) {
        state.withLock { $0.channels[index] = channel }
    }

    /// Starts accepting on the first loop, once every listening channel is added.
    func start() { settle(0) }

    /// A connection accepted on one of the loops: counted there until its `closeFuture` completes.
    func accepted(_ connection: any Channel) {
        guard let index = loops.firstIndex(where: { $0 === connection.eventLoop }) else { return }
        change { $0.open[index] += 1 }
        connection.closeFuture.whenComplete { _ in self.change { $0.open[index] -= 1 } }
    }

    /// Open connections per loop.
    var openPerLoop: [Int] { state.withLock { $0.open } }

    /// The loop whose listening channel reads now, if any (at most one ever does).
    var readingLoop: Int? { state.withLock { $0.reading } }

    /// Applies a change of the counts and, if the turn moves, starts passing it on.
    private func change(_ update: (inout State) -> Void) {
        let next = state.withLock { state -> Int? in
            update(&state)
            state.owner = AcceptorChoice.next(open: state.open, current: state.owner)
            switch state.reading {
            case nil: return state.owner
            case let reading? where reading != state.owner: return reading
            case _?: return nil
            }
        }
        if let next { settle(next) }
    }

    /// On `loops[index]`'s thread: stops reading if the turn has moved on (and passes it to the
    /// owner), or starts reading if it is this loop's turn and no loop reads.
    private func settle(_ index: Int) {
        loops[index].execute {
            let (channel, isOwner, isReading, noneReading) = self.state.withLock {
                ($0.channels[index], $0.owner == index, $0.reading == index, $0.reading == nil)
            }
            guard let channel else { return }
            if isReading, !isOwner {
                // Stop first, then say so: no other loop starts before this one has stopped.
                try? channel.syncOptions?.setOption(.autoRead, value: false)
                let owner = self.state.withLock { state -> Int in
                    state.reading = nil
                    return state.owner
                }
                self.settle(owner)
            } else if isOwner, noneReading {
                let start = self.state.withLock { state -> Bool in
                    guard state.reading == nil, state.owner == index else { return false }
                    state.reading = index
                    return true
                }
                if start { try? channel.syncOptions?.setOption(.autoRead, value: true) }
            }
        }
    }
}

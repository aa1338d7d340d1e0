import Glibc
import NIOCore
import Synchronization

/// Makes the token-endpoint event loop handle its sockets in batches while a refresh storm is on.
///
/// In a storm a saturated token endpoint answers one grant every few milliseconds. Read as each
/// arrives, every answer wakes the loop from idle and runs AsyncHTTPClient's parser, state
/// machines and pool bookkeeping alone on cold caches — measured at about 0.4 ms of CPU per
/// grant here, where the same work done for several answers at once costs a fraction of that.
/// So while storm requests are outstanding the loop naps between turns: a task on the loop
/// sleeps for the pacing interval, the answers that arrive meanwhile wait in their sockets, and
/// the next turn reads them all, sends the requests queued meanwhile and resumes their grants
/// together. Like interrupt coalescing in a network card, it trades a bounded delay for fewer
/// wake-ups.
///
/// Only on a loop that does nothing but token-endpoint I/O (``HTTPClientPool`` owns one): a nap
/// blocks everything on its loop. Requests with no pacing (a caller waits for the grant) made
/// during a storm wait at most one interval to be sent and one for their answer.
public final class StormPacer: Sendable {
    private let loop: any EventLoop
    private let state = Mutex(PacingState())

    public init(loop: any EventLoop) { self.loop = loop }

    /// Between two naps: long enough that the next nap is not due before the loop polls.
    static let pollGap = TimeAmount.microseconds(100)

    /// A storm request is about to be sent: starts napping if the loop is not already.
    public func requestStarted(pacing: Duration) {
        guard pacing > .zero else { return }
        if state.withLock({ $0.requestStarted(interval: pacing) }) {
            loop.execute { [self] in nap() }
        }
    }

    /// A storm request got its answer (or failed).
    public func requestFinished(pacing: Duration) {
        guard pacing > .zero else { return }
        state.withLock { $0.requestFinished() }
    }

    /// Whether the loop is napping between turns now (for tests).
    public var isPacing: Bool { state.withLock { $0.napping } }

    /// One nap, then the next one after the loop's next turn — as long as storm requests are
    /// outstanding. Runs on the loop.
    private func nap() {
        guard let interval = state.withLock({ $0.nextNap() }) else { return }
        let (seconds, attoseconds) = interval.components
        var remaining = timespec(tv_sec: Int(seconds), tv_nsec: Int(attoseconds / 1_000_000_000))
        while true {
            let request = remaining
            guard nanosleep([request], &remaining) == -1, errno == EINTR else { break }
        }
        // Not due at once: a loop runs every task that is due before it polls its sockets again,
        // so a nap scheduled for now would starve them. This one is due after the loop's poll.
        loop.scheduleTask(in: Self.pollGap) { [self] in nap() }
    }
}

/// What ``StormPacer`` decides, free of I/O: whether the loop naps, and for how long.
struct PacingState: Sendable, Equatable {
    /// Storm requests sent and not yet answered.
    private(set) var outstanding = 0
    /// The nap loop is running.
    private(set) var napping = false
    /// The shortest interval asked for by a request of this storm.
    private(set) var interval: Duration = .zero

    /// Counts a request; true when the caller must start the nap loop.
    mutating func requestStarted(interval requested: Duration) -> Bool {
        outstanding += 1
        interval = interval == .zero ? requested : min(interval, requested)
        if napping { return false }
        napping = true
        return true
    }

    mutating func requestFinished() {
        outstanding = max(0, outstanding - 1)
    }

    /// The next nap's length, or nil when the storm is over (nothing outstanding): the nap loop
    /// ends and the loop goes back to handling each event as it comes.
    mutating func nextNap() -> Duration? {
        guard outstanding > 0 else {
            napping = false
            interval = .zero
            return nil
        }
        return interval
    }
}

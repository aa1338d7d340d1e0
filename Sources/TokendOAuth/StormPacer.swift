import Glibc
import NIOCore
import NIOPosix
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
///
/// The nap is taken at the end of each of the loop's ticks (NIO calls the loop's
/// ``NIOEventLoopMetricsDelegate`` there), so every nap follows a poll of the sockets. An
/// earlier version scheduled each nap as a task 100 µs after the last: on a busy machine the
/// tasks queued during a nap took longer than that, the next nap was due before the loop
/// polled, and naps ran back to back with no socket read between them — grants in a crash
/// test waited seconds for answers their provider had long sent.
public final class StormPacer: NIOEventLoopMetricsDelegate, Sendable {
    private let state = Mutex(PacingState())

    /// Pass the pacer as the `metricsDelegate` of the one-loop group it paces.
    public init() {}

    /// A storm request is about to be sent: the loop naps after each tick from now on.
    public func requestStarted(pacing: Duration) {
        guard pacing > .zero else { return }
        state.withLock { $0.requestStarted(interval: pacing) }
    }

    /// A storm request got its answer (or failed).
    public func requestFinished(pacing: Duration) {
        guard pacing > .zero else { return }
        state.withLock { $0.requestFinished() }
    }

    /// Whether the loop naps between ticks now (for tests).
    public var isPacing: Bool { state.withLock { $0.outstanding > 0 } }

    /// Called by NIO on the paced loop after each tick — the tick polled the sockets and ran
    /// the tasks that were due — so the nap lets answers gather for the next one.
    public func processedTick(info: NIOEventLoopTickInfo) {
        guard let interval = state.withLock({ $0.nextNap() }) else { return }
        let (seconds, attoseconds) = interval.components
        var remaining = timespec(tv_sec: Int(seconds), tv_nsec: Int(attoseconds / 1_000_000_000))
        while true {
            let request = remaining
            guard nanosleep([request], &remaining) == -1, errno == EINTR else { break }
        }
    }
}

/// What ``StormPacer`` decides, free of I/O: whether the loop naps, and for how long.
struct PacingState: Sendable, Equatable {
    /// Storm requests sent and not yet answered.
    private(set) var outstanding = 0
    /// The shortest interval asked for by a request of this storm.
    private(set) var interval: Duration = .zero

    /// Counts a request of the storm.
    mutating func requestStarted(interval requested: Duration) {
        outstanding += 1
        interval = interval == .zero ? requested : min(interval, requested)
    }

    mutating func requestFinished() {
        outstanding = max(0, outstanding - 1)
    }

    /// The next nap's length, or nil when no storm is on (nothing outstanding): the loop
    /// handles each event as it comes, and the next storm starts from its own interval.
    mutating func nextNap() -> Duration? {
        guard outstanding > 0 else {
            interval = .zero
            return nil
        }
        return interval
    }
}

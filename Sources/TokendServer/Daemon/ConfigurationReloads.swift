import Synchronization

/// What a reload of the configuration came to.
enum ReloadVerdict: Sendable, Equatable {
    /// The file was read and is in force: its path (nil: the built-in defaults), its providers
    /// and the changed settings that take effect only at the next start.
    case applied(file: String?, providers: [String], restartNeeded: [String])
    /// The file did not load (the message names it, the key and the problem); the running
    /// configuration stays in force.
    case refused(String)
}

/// The reloads of the configuration, one at a time, whoever asked: SIGHUP (nobody waits for the
/// verdict) or the `Reload` method (the caller does: `tokend --reload`, which tokend.service's
/// `ExecReload=` runs, so that `systemctl reload` reports it).
///
/// Requests queue in order and the daemon's one loop (``run(_:)``) carries them out, so two
/// reloads never interleave however they were asked for. A request made after the queue ended
/// (the daemon is stopping), or left in it then, is refused.
final class ConfigurationReloads: Sendable {
    private struct Request: Sendable {
        /// The waiting caller's key in `waiting`; nil for SIGHUP.
        let waiter: Int?
    }

    private let stream: AsyncStream<Request>
    private let continuation: AsyncStream<Request>.Continuation
    private struct Waiting {
        var callers: [Int: CheckedContinuation<ReloadVerdict, Never>] = [:]
        /// The caller whose reload is being carried out: answered by the loop, even when the
        /// queue ends meanwhile.
        var current: Int?
    }

    private let waiting = Mutex(Waiting())
    private let nextWaiter = Atomic<Int>(0)

    static let stopping = ReloadVerdict.refused("tokend is stopping; the configuration was not reloaded")

    init() {
        (stream, continuation) = AsyncStream.makeStream(of: Request.self, bufferingPolicy: .unbounded)
    }

    /// Asks for a reload without waiting for it (SIGHUP).
    func request() {
        continuation.yield(Request(waiter: nil))
    }

    /// Asks for a reload and returns its verdict once it has been carried out.
    func requestAndWait() async -> ReloadVerdict {
        await withCheckedContinuation { (waiter: CheckedContinuation<ReloadVerdict, Never>) in
            let id = nextWaiter.add(1, ordering: .relaxed).newValue
            waiting.withLock { $0.callers[id] = waiter }
            if case .terminated = continuation.yield(Request(waiter: id)) { answer(id, Self.stopping) }
        }
    }

    /// Carries out the requests in order until ``finish()``; then refuses those still queued.
    func run(_ reload: @Sendable () async -> ReloadVerdict) async {
        for await request in stream {
            waiting.withLock { $0.current = request.waiter }
            let verdict = await reload()
            waiting.withLock { $0.current = nil }
            if let id = request.waiter { answer(id, verdict) }
        }
        finish()
    }

    /// Ends the queue (graceful shutdown): later requests, and those not carried out yet, are
    /// refused.
    func finish() {
        continuation.finish()
        let left = waiting.withLock { waiting in
            let left = waiting.callers.filter { $0.key != waiting.current }
            for id in left.keys { waiting.callers.removeValue(forKey: id) }
            return Array(left.values)
        }
        for waiter in left { waiter.resume(returning: Self.stopping) }
    }

    /// Whether a caller waits for a verdict (for tests).
    var hasWaitingCallers: Bool { waiting.withLock { !$0.callers.isEmpty } }

    /// Resumes the caller waiting as `id` once: whoever takes it out of `waiting` answers.
    private func answer(_ id: Int, _ verdict: ReloadVerdict) {
        waiting.withLock { $0.callers.removeValue(forKey: id) }?.resume(returning: verdict)
    }
}

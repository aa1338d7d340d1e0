import NIOCore
import Synchronization

/// The client connections that are open, so a graceful stop can ask each to finish and then
/// wait for them.
final class OpenConnections: Sendable {
    private struct State {
        var channels: [ObjectIdentifier: any Channel] = [:]
        var whenEmpty: [CheckedContinuation<Void, Never>] = []
        /// A graceful stop has begun: connections set up from now on finish at once.
        var quiescing = false
    }

    private let state = Mutex(State())

    /// Tracks `channel` until it closes. Call on its event loop once its handlers are in place:
    /// a connection accepted just before a graceful stop, whose setup finishes after the stop
    /// asked the others to finish, is asked too (rather than cut off when the process exits).
    func add(_ channel: any Channel) {
        let id = ObjectIdentifier(channel)
        let quiescing = state.withLock { state in
            state.channels[id] = channel
            return state.quiescing
        }
        if quiescing { Self.askToFinish(channel) }
        channel.closeFuture.whenComplete { [self] _ in
            let waiters = state.withLock { state -> [CheckedContinuation<Void, Never>] in
                state.channels.removeValue(forKey: id)
                guard state.channels.isEmpty else { return [] }
                defer { state.whenEmpty = [] }
                return state.whenEmpty
            }
            for waiter in waiters { waiter.resume() }
        }
    }

    var count: Int { state.withLock { $0.channels.count } }

    /// Asks every connection to finish (`ChannelShouldQuiesceEvent`: answer the calls already
    /// received, read no more — but a connection's first call, when none has come yet, for a
    /// moment — and close), waits for them until `deadline`, then closes those left.
    ///
    /// - Returns: How many connections had to be closed at the deadline.
    func quiesce(deadline: ContinuousClock.Instant) async -> Int {
        let channels = state.withLock { state in
            state.quiescing = true
            return Array(state.channels.values)
        }
        for channel in channels {
            channel.eventLoop.execute { Self.askToFinish(channel) }
        }
        let finished = await waitUntil(deadline: deadline) { await self.waitUntilEmpty() }
        if finished { return 0 }
        let left = state.withLock { Array($0.channels.values) }
        for channel in left { channel.close(promise: nil) }
        return left.count
    }

    /// Read no more calls (but a first one); the handler answers those it has, then closes.
    /// Run on the channel's event loop.
    private static func askToFinish(_ channel: any Channel) {
        try? channel.syncOptions?.setOption(ChannelOptions.autoRead, value: false)
        channel.pipeline.fireUserInboundEventTriggered(ChannelShouldQuiesceEvent())
    }

    private func waitUntilEmpty() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let resumeNow = state.withLock { state -> Bool in
                if state.channels.isEmpty { return true }
                state.whenEmpty.append(continuation)
                return false
            }
            if resumeNow { continuation.resume() }
        }
    }
}

/// Runs `operation` until it finishes or `deadline` passes, whichever is first.
///
/// The operation runs in an unstructured task on purpose: what it waits for (a connection, a
/// grant) may not react to cancellation, and shutdown must not wait past its deadline for it.
///
/// - Returns: Whether the operation finished in time.
func waitUntil(deadline: ContinuousClock.Instant, _ operation: @escaping @Sendable () async -> Void) async -> Bool {
    let outcome = FirstOutcome()
    return await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
        outcome.set(continuation)
        let timer = Task {
            try? await Task.sleep(until: deadline, clock: .continuous)
            outcome.resolve(false)
        }
        Task {
            await operation()
            if outcome.resolve(true) { timer.cancel() }
        }
    }
}

/// Resumes a continuation once, with whichever result comes first.
private final class FirstOutcome: Sendable {
    private let state = Mutex<(continuation: CheckedContinuation<Bool, Never>?, result: Bool?)>((nil, nil))

    func set(_ continuation: CheckedContinuation<Bool, Never>) {
        let early = state.withLock { state -> Bool? in
            if let result = state.result { return result }
            state.continuation = continuation
            return nil
        }
        if let early { continuation.resume(returning: early) }
    }

    /// Returns whether this call decided the outcome.
    @discardableResult
    func resolve(_ result: Bool) -> Bool {
        let (decided, continuation) = state.withLock { state -> (Bool, CheckedContinuation<Bool, Never>?) in
            guard state.result == nil else { return (false, nil) }
            state.result = result
            defer { state.continuation = nil }
            return (true, state.continuation)
        }
        continuation?.resume(returning: result)
        return decided
    }
}

import TokendJSON
import TokendProtocol

extension TokendClient {
    /// The daemon's `WatchReloginWarnings` method.
    static let watchReloginWarningsMethod = "io.tokend.TokenProvider.WatchReloginWarnings"

    /// The re-login warnings of the credentials the caller owns or reads, from the daemon's
    /// `WatchReloginWarnings` method (see ``ReloginWarningUpdates``).
    ///
    /// The stream runs on a connection of its own, opened at once by a task of its own. When the
    /// connection is lost after the first reply (the daemon restarted), it reconnects with
    /// exponential backoff (``ReconnectBackoff``) and calls the method again; warnings still in
    /// force come again then. Before the first reply, a daemon that cannot be reached ends the
    /// stream with `daemonUnavailable`.
    ///
    /// Cancelling the consuming task, or dropping the iterator, closes the connection.
    /// - Parameter backoff: the delays between reconnection attempts.
    /// - Returns: the sequence of warnings.
    public func reloginWarnings(backoff: ReconnectBackoff = ReconnectBackoff()) -> ReloginWarningUpdates {
        // Warnings are few and each one matters: none is dropped for a slow consumer.
        let (stream, continuation) = AsyncStream<Result<ReloginWarning, TokendClientError>>.makeStream(
            bufferingPolicy: .bufferingNewest(256))
        let watcher = ReloginWarningWatcher(client: self, backoff: backoff, continuation: continuation)
        let task = Task { await watcher.run() }
        continuation.onTermination = { _ in task.cancel() }
        return ReloginWarningUpdates(stream: stream)
    }
}

/// Drives one ``ReloginWarningUpdates`` stream: connects, calls `WatchReloginWarnings`,
/// forwards the warnings, and reconnects after a lost connection.
private struct ReloginWarningWatcher: Sendable {
    let client: TokendClient
    let backoff: ReconnectBackoff
    let continuation: AsyncStream<Result<ReloginWarning, TokendClientError>>.Continuation

    private struct Shared: Sendable {
        var receivedSinceConnect = false
        var everReceived = false
        var terminal: TokendClientError?
    }

    func run() async {
        var backoff = self.backoff
        let call = VarlinkCall(method: TokendClient.watchReloginWarningsMethod, parameters: [:], more: true)
        let shared = LockedBox(Shared())
        while !Task.isCancelled {
            let failure = await watchOnce(call, shared: shared)
            let state = shared.value
            if let terminal = state.terminal {
                finish(throwing: terminal)
                return
            }
            if let failure {
                // Retried only once the stream worked: a daemon restart explains a lost
                // connection then, while a wrong socket at the start is reported at once.
                let transient = failure.code == .daemonUnavailable || failure.code == .timeout || failure.code == .protocolError
                guard transient, state.everReceived else {
                    finish(throwing: failure)
                    return
                }
            }
            if Task.isCancelled { break }
            if state.receivedSinceConnect { backoff.reset() }
            do {
                try await Task.sleep(for: backoff.nextDelay(jitter: Double.random(in: 0...1)))
            } catch {
                break
            }
        }
        continuation.finish()
    }

    /// One connection and one call on it, until either ends; the error that ended it, if any.
    private func watchOnce(_ call: VarlinkCall, shared: LockedBox<Shared>) async -> TokendClientError? {
        let connection: TokendConnection
        do {
            connection = try await TokendConnection.connect(
                socketPath: client.socketPath, maximumMessageBytes: client.maximumMessageBytes, connectTimeout: client.callTimeout,
                eventLoopGroup: client.eventLoopGroup)
        } catch {
            return error
        }
        shared.withLock { $0.receivedSinceConnect = false }
        client.countRoundTrip()
        let continuation = self.continuation
        var failure: TokendClientError?
        do {
            try await connection.stream(call) { [connection] reply in
                let keepGoing = Self.handle(reply, call: call, shared: shared, continuation: continuation)
                if !keepGoing, reply.continues, reply.error == nil {
                    connection.channel.eventLoop.execute { connection.channel.close(promise: nil) }
                }
            }
        } catch {
            failure = error.code == .cancelled ? nil : error
        }
        await connection.close()
        return failure
    }

    /// One reply: yields its warnings, or notes the error that ends the stream.
    /// - Returns: whether the stream may go on.
    private static func handle(
        _ reply: VarlinkReply, call: VarlinkCall, shared: LockedBox<Shared>,
        continuation: AsyncStream<Result<ReloginWarning, TokendClientError>>.Continuation
    ) -> Bool {
        if let name = reply.error {
            shared.withLock { $0.terminal = TokendClientError(varlinkErrorName: name, parameters: reply.parameters, call: call) }
            return false
        }
        let warnings: [ReloginWarning]
        do {
            warnings = try ReloginWarning.list(from: reply.parameters)
        } catch {
            shared.withLock { $0.terminal = TokendClient.invalidReply(call, error) }
            return false
        }
        shared.withLock {
            $0.receivedSinceConnect = true
            $0.everReceived = true
        }
        for warning in warnings { continuation.yield(.success(warning)) }
        return true
    }

    private func finish(throwing error: TokendClientError) {
        continuation.yield(.failure(error))
        continuation.finish()
    }
}

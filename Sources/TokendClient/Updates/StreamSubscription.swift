import TokendProtocol

/// Drives one ``TokendUpdates`` stream: connects, makes the streaming call, forwards what each
/// reply holds, and after a lost connection reconnects with backoff and calls again.
///
/// A lost connection is retried only once a reply was received: a daemon restart explains it
/// then, while a wrong socket or a daemon that is not running at the start is reported at once.
/// An error reply ends the stream.
struct StreamSubscription<Element: Sendable>: Sendable {
    let client: TokendClient
    let call: VarlinkCall
    let backoff: ReconnectBackoff
    let continuation: AsyncStream<Result<Element, TokendClientError>>.Continuation
    /// The values one reply holds, in order (run on the event loop); a thrown error ends the
    /// stream.
    let values: @Sendable (VarlinkReply) throws(TokendClientError) -> [Element]
    /// Told the error of an error reply before the stream ends with it.
    var onErrorReply: @Sendable (TokendClientError) -> Void = { _ in }

    /// What the reply callback (on the event loop) shares with the task.
    private struct Shared: Sendable {
        /// Whether any reply was received since the last (re)connection.
        var receivedSinceConnect = false
        /// Whether any reply was ever received: from then on, lost connections are retried.
        var everReceived = false
        /// The error that ends the stream, from an error reply or an unusable one.
        var terminal: TokendClientError?
    }

    private enum Outcome {
        /// The daemon ended the stream without an error (not what the protocol says it does):
        /// subscribed again, after the backoff.
        case ended
        case failed(TokendClientError)
        case cancelled
    }

    /// Starts the subscription on a task of its own, cancelled when the stream's consumer goes.
    static func start(
        _ call: VarlinkCall, client: TokendClient, backoff: ReconnectBackoff,
        bufferingPolicy: AsyncStream<Result<Element, TokendClientError>>.Continuation.BufferingPolicy,
        onErrorReply: @escaping @Sendable (TokendClientError) -> Void = { _ in },
        values: @escaping @Sendable (VarlinkReply) throws(TokendClientError) -> [Element]
    ) -> TokendUpdates<Element> {
        let (stream, continuation) = AsyncStream<Result<Element, TokendClientError>>.makeStream(bufferingPolicy: bufferingPolicy)
        let subscription = StreamSubscription(
            client: client, call: call, backoff: backoff, continuation: continuation, values: values, onErrorReply: onErrorReply)
        let task = Task { await subscription.run() }
        continuation.onTermination = { _ in task.cancel() }
        return TokendUpdates(stream: stream)
    }

    /// A stream that ends at once with `error`.
    static func failed(_ error: TokendClientError) -> TokendUpdates<Element> {
        let (stream, continuation) = AsyncStream<Result<Element, TokendClientError>>.makeStream()
        continuation.yield(.failure(error))
        continuation.finish()
        return TokendUpdates(stream: stream)
    }

    func run() async {
        var backoff = self.backoff
        let shared = LockedBox(Shared())
        while !Task.isCancelled {
            let outcome = await subscribeOnce(shared: shared)
            let state = shared.value
            if let terminal = state.terminal {
                finish(throwing: terminal)
                return
            }
            switch outcome {
            case .cancelled:
                continuation.finish()
                return
            case .failed(let error):
                let transient = error.code == .daemonUnavailable || error.code == .timeout || error.code == .protocolError
                guard transient, state.everReceived else {
                    finish(throwing: error)
                    return
                }
            case .ended:
                break
            }
            if state.receivedSinceConnect { backoff.reset() }
            do {
                try await Task.sleep(for: backoff.nextDelay(jitter: Double.random(in: 0...1)))
            } catch {
                break
            }
        }
        continuation.finish()
    }

    /// One connection and one call on it, until either ends.
    private func subscribeOnce(shared: LockedBox<Shared>) async -> Outcome {
        let connection: TokendConnection
        do {
            connection = try await TokendConnection.connect(
                socketPath: client.socketPath, maximumMessageBytes: client.maximumMessageBytes, connectTimeout: client.callTimeout,
                eventLoopGroup: client.eventLoopGroup)
        } catch {
            return Task.isCancelled ? .cancelled : .failed(error)
        }
        shared.withLock { $0.receivedSinceConnect = false }
        client.countRoundTrip()
        let outcome: Outcome
        do {
            try await connection.stream(call) { [connection, self] reply in
                // A reply that cannot be used ends the stream; the daemon would go on sending.
                // (Closed from a fresh event loop tick, not from inside the handler's read.)
                if !handle(reply, shared: shared), reply.continues, reply.error == nil {
                    connection.channel.eventLoop.execute { connection.channel.close(promise: nil) }
                }
            }
            outcome = .ended
        } catch {
            outcome = error.code == .cancelled || Task.isCancelled ? .cancelled : .failed(error)
        }
        await connection.close()
        return outcome
    }

    /// One reply: yields its values, or notes the error that ends the stream.
    /// - Returns: whether the stream may go on.
    private func handle(_ reply: VarlinkReply, shared: LockedBox<Shared>) -> Bool {
        if let name = reply.error {
            let error = TokendClientError(varlinkErrorName: name, parameters: reply.parameters, call: call)
            shared.withLock { $0.terminal = error }
            onErrorReply(error)
            return false
        }
        let received: [Element]
        do {
            received = try values(reply)
        } catch {
            shared.withLock { $0.terminal = error }
            return false
        }
        shared.withLock {
            $0.receivedSinceConnect = true
            $0.everReceived = true
        }
        for value in received { continuation.yield(.success(value)) }
        return true
    }

    private func finish(throwing error: TokendClientError) {
        continuation.yield(.failure(error))
        continuation.finish()
    }
}

import TokendJSON
import TokendProtocol

extension TokendClient {
    /// The credentials of `userIdentifier` as they change, from the daemon's `Watch` method.
    ///
    /// The stream runs on a connection of its own (a `Watch` holds its connection until its
    /// last reply), opened at once by a task of its own. It yields the current credentials
    /// first and then each new token; each one also refreshes the in-process cache. When the connection
    /// is lost after the first reply (the daemon restarted), it reconnects with exponential
    /// backoff (see ``ReconnectBackoff``) and calls `Watch` again, skipping credentials equal to
    /// the ones it delivered last. It ends by throwing ``TokendClientError`` on removal
    /// (`unknownUser`), on `reauthenticationRequired` or `permissionDenied`, and with
    /// `daemonUnavailable` when the daemon cannot be reached before the first reply.
    ///
    /// Cancelling the consuming task, or dropping the iterator, closes the connection.
    /// - Parameters:
    ///   - userIdentifier: whose credentials.
    ///   - backoff: the delays between reconnection attempts.
    /// - Returns: the sequence of credentials.
    public func updates(
        for userIdentifier: String,
        backoff: ReconnectBackoff = ReconnectBackoff()
    ) -> CredentialUpdates {
        let (stream, continuation) = AsyncStream<Result<Credentials, TokendClientError>>.makeStream(
            bufferingPolicy: .bufferingNewest(1)
        )
        let watcher = Watcher(
            client: self,
            userIdentifier: userIdentifier,
            backoff: backoff,
            continuation: continuation
        )
        let task = Task { await watcher.run() }
        continuation.onTermination = { _ in task.cancel() }
        return CredentialUpdates(stream: stream)
    }
}

/// Drives one ``CredentialUpdates`` stream: connects, calls `Watch`, forwards replies, and
/// reconnects after a lost connection.
private struct Watcher: Sendable {
    let client: TokendClient
    let userIdentifier: String
    let backoff: ReconnectBackoff
    let continuation: AsyncStream<Result<Credentials, TokendClientError>>.Continuation

    /// What the reply callback (on the event loop) shares with the task.
    private struct Shared: Sendable {
        /// The last credentials yielded, to skip a repeat after resubscribing.
        var lastDelivered: Credentials?
        /// Whether any reply was received since the last (re)connection.
        var receivedSinceConnect = false
        /// Whether any reply was ever received: from then on, lost connections are retried.
        var everReceived = false
        /// The error that ends the stream, from an error reply.
        var terminal: TokendClientError?
    }

    func run() async {
        var backoff = self.backoff
        let method = TokenProviderMethod.watch.rawValue
        do {
            try TokendClient.checkIdentifier(userIdentifier, name: "userIdentifier", method: method)
        } catch {
            finish(throwing: error)
            return
        }
        let call = VarlinkCall(method: method, parameters: ["userIdentifier": .string(userIdentifier)], more: true)
        let shared = LockedBox(Shared())

        while !Task.isCancelled {
            let outcome = await watchOnce(call, shared: shared)
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
                // Retry only what a daemon restart explains, and only once the stream worked:
                // a wrong socket or a daemon that is not running is reported at once.
                let transient =
                    error.code == .daemonUnavailable || error.code == .timeout || error.code == .protocolError
                guard transient, state.everReceived else {
                    finish(throwing: error)
                    return
                }
            case .ended:
                // The daemon ended the stream without an error (not what the protocol says it
                // does): subscribe again, after the backoff.
                break
            }
            if state.receivedSinceConnect { backoff.reset() }
            let delay = backoff.nextDelay(jitter: Double.random(in: 0...1))
            do {
                try await Task.sleep(for: delay)
            } catch {
                continuation.finish()
                return
            }
        }
        continuation.finish()
    }

    private enum Outcome {
        case ended
        case failed(TokendClientError)
        case cancelled
    }

    /// One connection and one `Watch` call on it, until either ends.
    private func watchOnce(_ call: VarlinkCall, shared: LockedBox<Shared>) async -> Outcome {
        let connection: TokendConnection
        do {
            connection = try await TokendConnection.connect(
                socketPath: client.socketPath,
                maximumMessageBytes: client.maximumMessageBytes,
                connectTimeout: client.callTimeout,
                eventLoopGroup: client.eventLoopGroup
            )
        } catch {
            return Task.isCancelled ? .cancelled : .failed(error)
        }
        shared.withLock { $0.receivedSinceConnect = false }
        client.countRoundTrip()
        let userIdentifier = self.userIdentifier
        let continuation = self.continuation
        let client = self.client
        let outcome: Outcome
        do {
            try await connection.stream(call) { [connection] reply in
                let keepGoing = Self.handle(
                    reply,
                    call: call,
                    userIdentifier: userIdentifier,
                    shared: shared,
                    client: client,
                    continuation: continuation
                )
                // A reply that cannot be used ends the stream; the daemon would go on sending.
                // (Closed from a fresh event loop tick, not from inside the handler's read.)
                if !keepGoing, reply.continues, reply.error == nil {
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

    /// One reply of `Watch`: yield new credentials, or note the error that ends the stream.
    /// - Returns: whether the stream may go on.
    private static func handle(
        _ reply: VarlinkReply,
        call: VarlinkCall,
        userIdentifier: String,
        shared: LockedBox<Shared>,
        client: TokendClient,
        continuation: AsyncStream<Result<Credentials, TokendClientError>>.Continuation
    ) -> Bool {
        if let name = reply.error {
            let error = TokendClientError(varlinkErrorName: name, parameters: reply.parameters, call: call)
            shared.withLock { $0.terminal = error }
            if error.endsCredential { client.cache.withLock { $0.remove(userIdentifier) } }
            return false
        }
        let credentials: Credentials
        do {
            credentials = try TokendClient.credentials(in: reply, of: call, for: userIdentifier)
        } catch {
            shared.withLock { $0.terminal = error }
            return false
        }
        let isNew = shared.withLock { state -> Bool in
            state.receivedSinceConnect = true
            state.everReceived = true
            guard state.lastDelivered != credentials else { return false }
            state.lastDelivered = credentials
            return true
        }
        guard isNew else { return true }
        client.cache.withLock { $0.store(credentials, now: WallClock.nowSeconds()) }
        continuation.yield(.success(credentials))
        return true
    }

    private func finish(throwing error: TokendClientError) {
        continuation.yield(.failure(error))
        continuation.finish()
    }
}

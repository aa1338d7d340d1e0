import NIOCore
import NIOPosix
import Synchronization
import TokendProtocol

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// One connection to tokend's Varlink socket.
///
/// Calls may be made concurrently: they are pipelined on the connection and their replies
/// matched in order. A call that times out closes the connection (a late reply would be taken
/// for the next call's); so does anything else that leaves the connection unusable, failing the
/// calls still waiting. ``TokendClient`` replaces a closed connection on the next call; use a
/// connection directly only when a call needs one of its own.
public final class TokendConnection: Sendable {
    /// The socket path this connection was made to.
    public let socketPath: String
    let channel: any Channel
    private let nextCallID = Atomic<UInt64>(0)
    /// The error tokend refused the connection with at accept, if it did.
    private let refusal: RefusalAtAccept

    private init(socketPath: String, channel: any Channel, refusal: RefusalAtAccept) {
        self.socketPath = socketPath
        self.channel = channel
        self.refusal = refusal
    }

    /// Connects to tokend.
    /// - Parameters:
    ///   - socketPath: the daemon's Unix socket.
    ///   - maximumMessageBytes: the longest reply accepted; a longer one ends the connection.
    ///   - connectTimeout: how long connecting may take.
    ///   - eventLoopGroup: where the connection's I/O runs.
    /// - Returns: the open connection.
    /// - Throws: ``TokendClientError/Code/daemonUnavailable`` when nothing listens there,
    ///   ``TokendClientError/Code/permissionDenied`` when the socket may not be opened.
    public static func connect(
        socketPath: String,
        maximumMessageBytes: Int = 1 << 20,
        connectTimeout: Duration = .seconds(10),
        eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton
    ) async throws(TokendClientError) -> TokendConnection {
        do {
            return try await makeConnection(
                socketPath: socketPath,
                maximumMessageBytes: maximumMessageBytes,
                connectTimeout: connectTimeout,
                eventLoopGroup: eventLoopGroup
            ).get()
        } catch let error as TokendClientError {
            throw error
        } catch {
            throw connectError(error, socketPath: socketPath)
        }
    }

    /// Starts connecting; the future fails with a ``TokendClientError``.
    static func makeConnection(
        socketPath: String,
        maximumMessageBytes: Int,
        connectTimeout: Duration,
        eventLoopGroup: any EventLoopGroup
    ) -> EventLoopFuture<TokendConnection> {
        // A Unix socket whose accept queue is full refuses a connect at once (EAGAIN) instead of
        // waiting as TCP does: a burst of other clients, or a flood, must delay a caller, not fail
        // it. Try again, backing off from 1 ms to 50 ms, until the connect timeout.
        let eventLoop = eventLoopGroup.next()
        let deadline = NIODeadline.now() + TimeAmount(connectTimeout)
        let refusal = RefusalAtAccept()
        @Sendable func attempt(backoff: TimeAmount) -> EventLoopFuture<any Channel> {
            bootstrap(group: eventLoop, maximumMessageBytes: maximumMessageBytes, connectTimeout: connectTimeout, refusal: refusal)
                .connect(unixDomainSocketPath: socketPath).flatMapError { error in
                    guard (error as? IOError)?.errnoCode == EAGAIN, NIODeadline.now() + backoff < deadline else {
                        return eventLoop.makeFailedFuture(error)
                    }
                    return eventLoop.scheduleTask(in: backoff) {}.futureResult.flatMap {
                        attempt(backoff: min(backoff * 2, .milliseconds(50)))
                    }
                }
        }
        return attempt(backoff: .milliseconds(1))
            .map { channel in TokendConnection(socketPath: socketPath, channel: channel, refusal: refusal) }
            .flatMapErrorThrowing { error in throw connectError(error, socketPath: socketPath) }
    }

    /// A bootstrap for one connection attempt.
    private static func bootstrap(
        group: any EventLoopGroup, maximumMessageBytes: Int, connectTimeout: Duration, refusal: RefusalAtAccept
    ) -> ClientBootstrap {
        ClientBootstrap(group: group)
            .connectTimeout(TimeAmount(connectTimeout))
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(
                        ByteToMessageHandler(VarlinkFrameDecoder(maximumMessageBytes: maximumMessageBytes))
                    )
                    try channel.pipeline.syncOperations.addHandler(VarlinkClientHandler(refusal: refusal))
                }
            }
    }

    /// Whether the connection is still open. A closed connection fails every call.
    public var isActive: Bool { channel.isActive }

    /// Sends `call` and waits for all its replies.
    ///
    /// Error replies are returned, not thrown (a `more` call's error is its last reply); only a
    /// failure to get replies at all throws.
    /// - Parameters:
    ///   - call: the call; with `more`, every reply until one without `continues` is collected;
    ///     with `oneway`, the call returns `[]` once it is written.
    ///   - timeout: how long to wait for the last reply; `nil` waits as long as the connection
    ///     lives. When it passes, the connection is closed.
    /// - Returns: the replies, in order.
    /// - Throws: ``TokendClientError`` with code `timeout`, `daemonUnavailable` (the connection
    ///   closed), `protocolError` (an invalid reply; the connection closed) or `cancelled` (the
    ///   task was cancelled; the connection stays usable).
    public func call(_ call: VarlinkCall, timeout: Duration?) async throws(TokendClientError) -> [VarlinkReply] {
        try await perform(call, timeout: timeout, onReply: nil)
    }

    /// Sends a `more` call and hands over each reply as it arrives, until the last one.
    ///
    /// For calls that stream for as long as the connection lives (`Watch`): nothing is
    /// collected, so the stream may be endless. `onReply` runs on the connection's event loop
    /// and must not block; it also receives the final (error) reply.
    /// - Parameters:
    ///   - call: the call; it should have `more` set.
    ///   - onReply: told about each reply, in order.
    /// - Throws: ``TokendClientError``: `daemonUnavailable` (the connection closed),
    ///   `protocolError`, `cancelled` (the task was cancelled; the stream's later replies are
    ///   dropped, so close the connection).
    func stream(
        _ call: VarlinkCall,
        onReply: @escaping @Sendable (VarlinkReply) -> Void
    ) async throws(TokendClientError) {
        _ = try await perform(call, timeout: nil, onReply: onReply)
    }

    private func perform(
        _ call: VarlinkCall,
        timeout: Duration?,
        onReply: (@Sendable (VarlinkReply) -> Void)?
    ) async throws(TokendClientError) -> [VarlinkReply] {
        if Task.isCancelled {
            var error = TokendClientError(
                code: .cancelled,
                message: "the call to \(call.method) was cancelled",
                method: call.method
            )
            error.wasNotSent = true
            throw error
        }
        if let refused = refusal.value { return Self.answer(refused, onReply: onReply) }
        let id = nextCallID.wrappingAdd(1, ordering: .relaxed).oldValue
        let promise = channel.eventLoop.makePromise(of: [VarlinkReply].self)
        let outbound = OutboundCall(
            id: id,
            call: call,
            timeout: timeout.map { TimeAmount($0) },
            promise: promise,
            onReply: onReply
        )
        let channel = self.channel
        let method = call.method
        channel.writeAndFlush(outbound).whenFailure { error in
            // Usually the handler failed the call already (then this does nothing); this covers
            // a channel closed before the call reached the handler. Either way the call's bytes
            // did not all go out, so the daemon never saw it.
            var clientError = VarlinkClientHandler.connectionError(error, method: method)
            clientError.wasNotSent = true
            promise.fail(clientError)
        }
        do {
            return try await withTaskCancellationHandler {
                try await promise.futureResult.get()
            } onCancel: {
                channel.triggerUserOutboundEvent(VarlinkClientHandler.AbandonCall(id: id), promise: nil)
            }
        } catch let error as TokendClientError {
            // Closed because tokend refused the connection before this call reached it: the
            // refusal is the answer.
            if error.code == .daemonUnavailable, let refused = refusal.value { return Self.answer(refused, onReply: onReply) }
            throw error
        } catch {
            if let refused = refusal.value { return Self.answer(refused, onReply: onReply) }
            throw VarlinkClientHandler.connectionError(error, method: method)
        }
    }

    /// A refusal at accept as a call's reply: returned, or handed to `onReply`.
    private static func answer(_ refused: VarlinkReply, onReply: (@Sendable (VarlinkReply) -> Void)?) -> [VarlinkReply] {
        guard let onReply else { return [refused] }
        onReply(refused)
        return []
    }

    /// Closes the connection; calls still waiting fail with `daemonUnavailable`.
    public func close() async {
        try? await channel.close()
    }

    /// The error for a failed connect.
    static func connectError(_ error: any Error, socketPath: String) -> TokendClientError {
        if let clientError = error as? TokendClientError { return clientError }
        let path = Redaction.display(socketPath, secrets: [])
        if let ioError = error as? IOError {
            switch ioError.errnoCode {
            case ENOENT:
                return TokendClientError(
                    code: .daemonUnavailable,
                    message: "tokend is not running: there is no socket at \(path)",
                    cause: error
                )
            case ECONNREFUSED:
                return TokendClientError(
                    code: .daemonUnavailable,
                    message: "tokend is not running: nothing listens on \(path)",
                    cause: error
                )
            case EACCES, EPERM:
                return TokendClientError(
                    code: .permissionDenied,
                    message: "permission denied connecting to tokend's socket at \(path)",
                    cause: error
                )
            default:
                break
            }
        }
        if let addressError = error as? SocketAddressError, case .unixDomainSocketPathTooLong = addressError {
            return TokendClientError(
                code: .daemonUnavailable,
                message: "the socket path \(path) is too long for a Unix socket",
                cause: error
            )
        }
        if let channelError = error as? ChannelError, case .connectTimeout = channelError {
            return TokendClientError(code: .timeout, message: "connecting to tokend at \(path) timed out", cause: error)
        }
        return TokendClientError(
            code: .daemonUnavailable,
            message: "cannot connect to tokend at \(path): \(error)",
            cause: error
        )
    }
}

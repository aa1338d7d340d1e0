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

/// A client of tokend: asks the daemon for fresh access tokens over its Unix socket.
///
/// The client connects on its first call and then reuses that one connection for every call,
/// from any number of tasks at once (calls are pipelined and their replies matched in order).
/// When the connection is lost (the daemon restarted) or a call timed out, the next call opens
/// a fresh one; a call that never left the process because its connection had just closed is
/// sent once more on the fresh connection. Calls that were sent are never repeated.
///
/// ```swift
/// let client = TokendClient()
/// let credentials = try await client.credentials(for: "alice", minValidity: .seconds(60))
/// request.setValue("\(credentials.tokenType) \(credentials.accessToken)", forHTTPHeaderField: "Authorization")
/// ```
public final class TokendClient: Sendable {
    /// The production socket: `/run/tokend/io.tokend`.
    public static let defaultSocketPath = "/run/tokend/io.tokend"
    /// The environment variable that overrides ``defaultSocketPath``.
    public static let socketEnvironmentVariable = "TOKEND_SOCKET"

    /// The socket the client connects to.
    public let socketPath: String
    /// A socket tried first, when connecting, before ``socketPath``: the administrators' socket,
    /// which a root caller may use (`tokenctl` as root); `nil` for none.
    public let administratorsSocketPath: String?
    /// How long one call may wait for its reply.
    public let callTimeout: Duration
    /// The longest reply accepted.
    public let maximumMessageBytes: Int
    /// When ``credentials(for:minValidity:rejectedToken:)`` may answer from the in-process
    /// cache.
    public let cachePolicy: CachePolicy
    let eventLoopGroup: any EventLoopGroup

    /// What the client did so far, for tests and metrics.
    public struct Statistics: Sendable, Hashable {
        /// Calls sent to the daemon (each one a round trip), of any method; `Watch` streams
        /// count once per (re)subscription.
        public var roundTrips: Int
        /// Token requests answered from the in-process cache, without a round trip.
        public var cacheHits: Int

        /// Creates statistics (to compare with ``TokendClient/statistics``).
        public init(roundTrips: Int, cacheHits: Int) {
            self.roundTrips = roundTrips
            self.cacheHits = cacheHits
        }
    }

    private let roundTripCount = Atomic<Int>(0)
    private let cacheHitCount = Atomic<Int>(0)
    let cache: Mutex<CredentialCache>

    /// What the client did so far: round trips and cache hits.
    public var statistics: Statistics {
        Statistics(
            roundTrips: roundTripCount.load(ordering: .relaxed),
            cacheHits: cacheHitCount.load(ordering: .relaxed)
        )
    }

    func countRoundTrip() { roundTripCount.add(1, ordering: .relaxed) }
    func countCacheHit() { cacheHitCount.add(1, ordering: .relaxed) }

    private enum State {
        case idle
        case connecting(generation: UInt64, EventLoopFuture<TokendConnection>)
        case connected(TokendConnection)
    }

    private struct Box {
        var state: State = .idle
        var generation: UInt64 = 0
    }

    private let box = Mutex(Box())

    /// Creates a client; it connects on its first call.
    /// - Parameters:
    ///   - socketPath: the daemon's socket; `nil` means `$TOKEND_SOCKET`, else
    ///     `/run/tokend/io.tokend`.
    ///   - callTimeout: how long a call may wait for its reply (default 10 s).
    ///   - maximumMessageBytes: the longest reply accepted (default 1 MiB).
    ///   - cachePolicy: when tokens may come from the in-process cache (default: while they
    ///     stay valid long enough, for at most 60 s; ``CachePolicy/disabled`` turns it off).
    ///   - eventLoopGroup: where the connection's I/O runs (default: NIO's shared group).
    ///   - administratorsSocketPath: a socket to try first whenever the client connects, falling
    ///     back to `socketPath` when it cannot be connected to (default: none).
    public init(
        socketPath: String? = nil,
        administratorsSocketPath: String? = nil,
        callTimeout: Duration = .seconds(10),
        maximumMessageBytes: Int = 1 << 20,
        cachePolicy: CachePolicy = .default,
        eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton
    ) {
        self.socketPath =
            socketPath ?? Self.socketPath(environment: Self.environmentValue(Self.socketEnvironmentVariable))
        self.administratorsSocketPath = administratorsSocketPath
        self.callTimeout = callTimeout
        self.maximumMessageBytes = maximumMessageBytes
        self.cachePolicy = cachePolicy
        self.cache = Mutex(CredentialCache(policy: cachePolicy))
        self.eventLoopGroup = eventLoopGroup
    }

    deinit {
        // Nothing can call any more; release the socket.
        if case .connected(let connection) = box.withLock({ $0.state }) {
            connection.channel.close(promise: nil)
        }
    }

    /// The socket to use when none is given: `environmentValue` (the value of
    /// `$TOKEND_SOCKET`) when it is set and not empty, else ``defaultSocketPath``.
    public static func socketPath(environment environmentValue: String?) -> String {
        if let environmentValue, !environmentValue.isEmpty { return environmentValue }
        return defaultSocketPath
    }

    static func environmentValue(_ name: String) -> String? {
        getenv(name).map { String(cString: $0) }
    }

    /// Sends a call and returns all its replies: one, several for `more`, none for `oneway`.
    ///
    /// Error replies are returned, not thrown; the typed methods turn them into
    /// ``TokendClientError``s.
    /// - Parameter call: the call.
    /// - Returns: the replies, in order.
    /// - Throws: ``TokendClientError`` when no reply could be had: `daemonUnavailable`,
    ///   `timeout`, `protocolError`, `cancelled`.
    public func call(_ call: VarlinkCall) async throws(TokendClientError) -> [VarlinkReply] {
        var resent = false
        while true {
            let connection = try await connection()
            do {
                countRoundTrip()
                return try await connection.call(call, timeout: callTimeout)
            } catch {
                if error.code != .cancelled { discard(connection) }
                // A call that never reached the daemon is safe to send again, once.
                if error.wasNotSent, error.code == .daemonUnavailable, !resent {
                    resent = true
                    continue
                }
                throw error
            }
        }
    }

    /// Closes the connection, if there is one. Calls still waiting fail with
    /// `daemonUnavailable`; a later call connects again.
    public func close() async {
        let previous = box.withLock { box in
            let previous = box.state
            box.state = .idle
            box.generation &+= 1
            return previous
        }
        switch previous {
        case .idle: break
        case .connected(let connection): await connection.close()
        case .connecting(_, let future):
            if let connection = try? await future.get() { await connection.close() }
        }
    }

    // MARK: Connection management

    /// The open connection, or a new one.
    private func connection() async throws(TokendClientError) -> TokendConnection {
        enum Next {
            case use(TokendConnection)
            case wait(EventLoopFuture<TokendConnection>)
            case connect(generation: UInt64, EventLoopPromise<TokendConnection>)
        }
        let next: Next = box.withLock { box in
            switch box.state {
            case .connected(let connection) where connection.isActive:
                return .use(connection)
            case .connecting(_, let future):
                return .wait(future)
            case .idle, .connected:
                box.generation &+= 1
                let promise = eventLoopGroup.next().makePromise(of: TokendConnection.self)
                box.state = .connecting(generation: box.generation, promise.futureResult)
                return .connect(generation: box.generation, promise)
            }
        }
        let future: EventLoopFuture<TokendConnection>
        switch next {
        case .use(let connection):
            return connection
        case .wait(let pending):
            future = pending
        case .connect(let generation, let promise):
            // Started outside the lock: callbacks may run inline and take it again.
            future = promise.futureResult
            future.whenComplete { [weak self] result in
                self?.connectFinished(generation: generation, result: result)
            }
            let (socketPath, maximumMessageBytes, callTimeout, eventLoopGroup) = (
                self.socketPath, self.maximumMessageBytes, self.callTimeout, self.eventLoopGroup
            )
            func connect(_ path: String) -> EventLoopFuture<TokendConnection> {
                TokendConnection.makeConnection(
                    socketPath: path, maximumMessageBytes: maximumMessageBytes, connectTimeout: callTimeout,
                    eventLoopGroup: eventLoopGroup)
            }
            // The administrators' socket when it can be connected to, else the public one.
            let connecting = administratorsSocketPath.map { connect($0).flatMapError { _ in connect(socketPath) } } ?? connect(socketPath)
            connecting.cascade(to: promise)
        }
        do {
            return try await future.get()
        } catch let error as TokendClientError {
            throw error
        } catch {
            throw TokendConnection.connectError(error, socketPath: socketPath)
        }
    }

    private func connectFinished(generation: UInt64, result: Result<TokendConnection, any Error>) {
        let orphan: TokendConnection? = box.withLock { box in
            guard case .connecting(let current, _) = box.state, current == generation else {
                // close() ran while connecting: nobody will use this connection.
                if case .success(let connection) = result { return connection }
                return nil
            }
            switch result {
            case .success(let connection): box.state = .connected(connection)
            case .failure: box.state = .idle
            }
            return nil
        }
        orphan?.channel.close(promise: nil)
    }

    /// Forgets `connection` (after a timeout or a lost connection) so the next call opens a
    /// new one, and closes it.
    private func discard(_ connection: TokendConnection) {
        box.withLock { box in
            if case .connected(let current) = box.state, current === connection {
                box.state = .idle
            }
        }
        if connection.isActive { connection.channel.close(promise: nil) }
    }
}

import Logging
import NIOCore
import NIOPosix
import TokendCore
import TokendProtocol

#if canImport(Glibc)
    import Glibc
#endif

/// Binds the Unix socket and sets up each accepted connection: connection limit, the caller's
/// identity from the kernel, framing, and the Varlink handler.
struct SocketListener {
    struct Limits: Sendable {
        var maximumMessageBytes: Int
        var maximumPendingCalls: Int
        /// How long a begun message may take to finish (`PartialMessageTimeout`).
        var messageTimeout: TimeAmount = .seconds(10)
    }

    let router: CallRouter
    let limiter: ConnectionLimiter
    /// The administrators' socket's connections, counted apart from the public socket's.
    let administratorsLimiter: ConnectionLimiter
    let limits: Limits
    let logger: Logger
    /// Every open client connection, for a graceful stop.
    let connections = OpenConnections()
    /// What the `LoadCredential=` socket serves (``SocketRole/loadCredential``).
    let loadCredentials: LoadCredentialService
    /// Calls by method and error.
    var requestMetrics = RequestMetrics()

    /// The accept queue of a socket tokend binds itself.
    static let backlog: CInt = 1024

    /// Binds `path` (replacing a stale socket file, refusing one a live process listens on) with
    /// its mode set before any client can reach it (``UnixSocketFile``).
    ///
    /// - Returns: The serving channel and the socket file, to remove at stop.
    func bind(path: String, mode: UInt32, role: SocketRole, group: any EventLoopGroup) async throws -> (any Channel, OwnedSocketFile) {
        try Self.removeStaleSocket(at: path)
        let placed = try UnixSocketFile.listen(at: path, mode: mode_t(mode), backlog: Self.backlog)
        if placed.othersMayReplaceIt {
            logger.warning(
                """
                other users may write the socket's directory (no sticky bit): they can remove or replace the socket; \
                put it in a directory only root and tokend can write
                """, metadata: ["socket": "\(path)"])
        }
        do {
            let channel = try await bootstrap(group: group, role: role).withBoundSocket(placed.descriptor).get()
            // NIO listens again on an adopted socket with its default backlog; this one keeps its own.
            Glibc.listen(placed.descriptor, Self.backlog)
            return (channel, placed.file)
        } catch {
            close(placed.descriptor)
            placed.file.remove()
            throw error
        }
    }

    /// Serves on a socket inherited from the service manager (socket activation).
    func adopt(descriptor: CInt, role: SocketRole, group: any EventLoopGroup) async throws -> any Channel {
        try await bootstrap(group: group, role: role).withBoundSocket(descriptor).get()
    }

    private func bootstrap(group: any EventLoopGroup, role: SocketRole) -> ServerBootstrap {
        if role == .loadCredential { return loadCredentials.bootstrap(group: group, connections: connections) }
        let router = self.router
        let limiter = role == .administrators ? administratorsLimiter : self.limiter
        let limits = self.limits
        let logger = self.logger
        let connections = self.connections
        let requestMetrics = self.requestMetrics
        return ServerBootstrap(group: group)
            .serverChannelOption(.backlog, value: 1024)
            // SO_PASSCRED while any credential has a program reader (``ProgramReaderPresence``).
            .serverChannelInitializer { listener in
                router.view.programReaders.register(listener: listener)
                return listener.eventLoop.makeSucceededVoidFuture()
            }
            .childChannelInitializer { channel in
                // Set here, synchronously, rather than as the bootstrap's child options, which
                // NIO applies through a chain of futures for every connection.
                do {
                    let options = channel.syncOptions
                    try options?.setOption(.writeBufferWaterMark, value: .init(low: 32 * 1024, high: 256 * 1024))
                    try options?.setOption(.maxMessagesPerRead, value: 16)
                    try options?.setOption(.allowRemoteHalfClosure, value: true)
                } catch {
                    return channel.eventLoop.makeFailedFuture(error)
                }
                // Who is calling comes first: the connection limits are per uid, with a share
                // kept for administrators.
                return PeerCredentials.read(from: channel).flatMapThrowing { peer in
                    let caller = peer.caller
                    let isAdmin = router.settings.current.accessPolicy.isAdmin(caller)
                    if role == .administrators, !isAdmin {
                        // Its file mode keeps others out; this is for a mode someone changed.
                        if limiter.recordRefusal(uid: caller.uid) > 0 {
                            logger.warning(
                                "connection refused: not an administrator, on the administrators' socket",
                                metadata: ["uid": "\(caller.uid)", "pid": "\(caller.pid)"])
                        }
                        try channel.pipeline.syncOperations.addHandler(
                            ConnectionRefusal(.permissionDenied(nil, reason: "this socket is for administrators only")))
                        return
                    }
                    switch limiter.admit(uid: caller.uid, isAdmin: isAdmin) {
                    case .refused(let refusal, let report):
                        if report > 0 {
                            logger.warning(
                                refusal.quota == .connections
                                    ? "connection refused: connection limit reached" : "connection refused: per-user limit reached",
                                metadata: [
                                    "uid": "\(caller.uid)", "quota": "\(refusal.quota.rawValue)", "limit": "\(refusal.limit)",
                                    "refused": "\(report)",
                                ])
                        }
                        try channel.pipeline.syncOperations.addHandler(ConnectionRefusal(refusal))
                        return
                    case .accepted:
                        channel.closeFuture.whenComplete { _ in limiter.release(uid: caller.uid) }
                    }
                    let senders = try peer.traceSenders(of: channel, programReaders: router.view.programReaders)
                    try channel.pipeline.syncOperations.addHandlers([
                        PartialMessageTimeout(limit: limits.messageTimeout, caller: caller, logger: logger),
                        ByteToMessageHandler(VarlinkFrameDecoder(maximumMessageBytes: limits.maximumMessageBytes)),
                        VarlinkConnectionHandler(
                            router: router, caller: caller, senders: senders, maximumPendingCalls: limits.maximumPendingCalls,
                            logger: logger, requestMetrics: requestMetrics
                        ),
                    ])
                    // After the handlers: a stop under way reaches the connection handler.
                    connections.add(channel)
                }
            }
    }

    /// A socket file left by a daemon that died is removed; one that a live process accepts
    /// connections on is left alone, and binding fails with a clear message.
    static func removeStaleSocket(at path: String) throws {
        var info = stat()
        guard lstat(path, &info) == 0 else { return }
        guard (info.st_mode & S_IFMT) == S_IFSOCK else {
            throw ListenerError("\(path) exists and is not a socket; refusing to replace it")
        }
        let probe = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard probe >= 0 else { return }
        defer { close(probe) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let capacity = MemoryLayout.size(ofValue: address.sun_path)
        guard path.utf8.count < capacity else { throw ListenerError("socket path \(path) is longer than \(capacity - 1) bytes") }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: path.utf8)
            raw[path.utf8.count] = 0
        }
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(probe, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        if connected == 0 { throw ListenerError("another process is already serving on \(path)") }
        unlink(path)
    }
}

struct ListenerError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

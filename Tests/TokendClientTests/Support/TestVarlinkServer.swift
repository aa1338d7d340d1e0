import NIOCore
import NIOPosix
import Synchronization
import TokendJSON
import TokendProtocol

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// What the test server does with one call.
enum ServerAction: Sendable {
    /// Sends these replies (several for a `more` call).
    case reply([VarlinkReply])
    /// Never answers.
    case silence
    /// Closes the connection without answering this call (or any later one).
    case close
}

/// A call as the test server received it.
struct ReceivedCall: Sendable {
    /// Which accepted connection it came on, counting from 0.
    var connection: Int
    var call: VarlinkCall
}

/// A tiny Varlink server on a temporary Unix socket that answers with canned replies.
///
/// With `batch` > 1 it holds calls until that many arrived on a connection and then writes all
/// their replies in one write, so the client sees several replies in one read.
final class TestVarlinkServer: Sendable {
    typealias Responder = @Sendable (_ call: VarlinkCall, _ connection: Int) -> ServerAction

    let socketPath: String
    private let serverChannel: any Channel
    private let shared: Shared

    final class Shared: Sendable {
        let received = Mutex<[ReceivedCall]>([])
        let connections = Mutex<[any Channel]>([])
        let respond: Responder
        let batch: Int

        init(respond: @escaping Responder, batch: Int) {
            self.respond = respond
            self.batch = batch
        }
    }

    private init(socketPath: String, serverChannel: any Channel, shared: Shared) {
        self.socketPath = socketPath
        self.serverChannel = serverChannel
        self.shared = shared
    }

    /// A fresh socket path under the temporary directory (short enough for `sun_path`).
    static func temporarySocketPath() -> String {
        "/tmp/tokend-client-test-\(getpid())-\(UInt64.random(in: 0...UInt64.max)).sock"
    }

    /// Starts a server.
    /// - Parameters:
    ///   - socketPath: where to listen; a fresh temporary path by default.
    ///   - batch: how many calls to collect on a connection before answering them in one write.
    ///   - respond: what to do with each call.
    static func start(
        socketPath: String = temporarySocketPath(),
        batch: Int = 1,
        respond: @escaping Responder
    ) async throws -> TestVarlinkServer {
        let shared = Shared(respond: respond, batch: batch)
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .childChannelInitializer { child in
                child.eventLoop.makeCompletedFuture {
                    let index = shared.connections.withLock { connections in
                        connections.append(child)
                        return connections.count - 1
                    }
                    try child.pipeline.syncOperations.addHandler(
                        ByteToMessageHandler(VarlinkFrameDecoder(maximumMessageBytes: 1 << 20))
                    )
                    try child.pipeline.syncOperations.addHandler(ServerHandler(shared: shared, connection: index))
                }
            }
            .bind(unixDomainSocketPath: socketPath, cleanupExistingSocketFile: true)
            .get()
        return TestVarlinkServer(socketPath: socketPath, serverChannel: channel, shared: shared)
    }

    /// The calls received so far, in order.
    var received: [ReceivedCall] { shared.received.withLock { $0 } }

    /// How many connections were accepted so far.
    var connectionCount: Int { shared.connections.withLock { $0.count } }

    /// Stops listening, closes every connection (as a daemon that exits does) and removes the
    /// socket file.
    func stop() async {
        try? await serverChannel.close()
        let connections = shared.connections.withLock { $0 }
        for connection in connections { try? await connection.close() }
        unlink(socketPath)
    }

    private final class ServerHandler: ChannelInboundHandler {
        typealias InboundIn = ByteBuffer
        typealias OutboundOut = ByteBuffer

        let shared: Shared
        let connection: Int
        var pending: [VarlinkCall] = []

        init(shared: Shared, connection: Int) {
            self.shared = shared
            self.connection = connection
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            let frame = unwrapInboundIn(data)
            guard let call = try? VarlinkCall.decode(frame.readableBytesView) else {
                context.close(promise: nil)
                return
            }
            shared.received.withLock { $0.append(ReceivedCall(connection: connection, call: call)) }
            pending.append(call)
            guard pending.count >= shared.batch else { return }

            var output = context.channel.allocator.buffer(capacity: 512)
            var closing = false
            for call in pending {
                switch shared.respond(call, connection) {
                case .reply(let replies):
                    for reply in replies {
                        var bytes: [UInt8] = []
                        reply.encode(into: &bytes)
                        output.writeVarlinkMessage(bytes)
                    }
                case .silence:
                    continue
                case .close:
                    closing = true
                }
                if closing { break }
            }
            pending.removeAll()
            if output.readableBytes > 0 {
                context.writeAndFlush(wrapOutboundOut(output), promise: nil)
            }
            if closing { context.close(promise: nil) }
        }

        func errorCaught(context: ChannelHandlerContext, error: any Error) {
            context.close(promise: nil)
        }
    }
}

/// Canned replies.
enum Canned {
    static func credentials(_ user: String, token: String = "access-token-for-tests", expiresAt: Int64 = 2_000_000_000)
        -> VarlinkReply
    {
        let credentials = Credentials(
            userIdentifier: user,
            accessToken: token,
            tokenType: "Bearer",
            expiresAt: expiresAt,
            issuedAt: 1_900_000_000
        )
        return VarlinkReply(parameters: ["credentials": .object(credentials.json)])
    }

    static func error(_ error: VarlinkError) -> VarlinkReply {
        VarlinkReply(error)
    }

    /// The reply `ProvideTokenReplacement` gets for the user in its parameters.
    static func answer(_ call: VarlinkCall) -> ServerAction {
        let user = call.parameters["userIdentifier"]?.stringValue ?? "?"
        return .reply([credentials(user, token: "token-of-\(user)")])
    }
}

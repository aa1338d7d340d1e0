import NIOCore
import NIOPosix

#if canImport(Glibc)
    import Glibc
#endif

/// nio-floor: the floor of a SwiftNIO server, for `bench/socket-bench.sh --floor-only`.
///
/// Like `bench/floor/echo_server.c`, it answers every NUL-terminated request with one fixed
/// reply of `--reply-bytes` bytes (the NUL counted) and never looks at what it reads; unlike it,
/// it serves the way tokend does: SwiftNIO's `ServerBootstrap` on an event loop per CPU, the
/// child options tokend sets, one handler. What tokend spends beyond this is its own work; what
/// this spends beyond the C floor is what any SwiftNIO server pays.
///
/// `--peer-credentials` also reads what tokend reads from the kernel before a connection's
/// first call (`SO_PEERCRED`, `SO_PEERGROUPS`, `SO_PEERPIDFD`), the same way (NIO's
/// `SocketOptionProvider`).
///
///     nio-floor [--quiet] [--mode M] [--threads N] [--reply-bytes N] [--max-seconds S] [--peer-credentials] PATH
///
/// `--mode` is accepted and ignored (the C floor's serving model), so scripts can start either.
struct Options {
    var path = ""
    var replyBytes = 100
    var maxSeconds = 600
    var threads = System.coreCount
    var peerCredentials = false

    static func parse(_ arguments: [String]) -> Options? {
        var options = Options()
        var index = 0
        func value() -> String? {
            index += 1
            return index < arguments.count ? arguments[index] : nil
        }
        while index < arguments.count {
            switch arguments[index] {
            case "--quiet": break
            case "--peer-credentials": options.peerCredentials = true
            case "--mode": guard value() != nil else { return nil }
            case "--threads":
                guard let n = value().flatMap({ Int($0) }), n > 0 else { return nil }
                options.threads = n
            case "--reply-bytes":
                guard let n = value().flatMap({ Int($0) }), n >= 2 else { return nil }
                options.replyBytes = n
            case "--max-seconds":
                guard let n = value().flatMap({ Int($0) }), n > 0 else { return nil }
                options.maxSeconds = n
            case let argument where argument.hasPrefix("-"): return nil
            case let argument: options.path = argument
            }
            index += 1
        }
        return options.path.isEmpty ? nil : options
    }
}

/// Answers each NUL it reads with the canned reply; the replies of one read go out in one write.
final class CannedReplyHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private let reply: ByteBuffer
    private var pending = false

    init(reply: ByteBuffer) { self.reply = reply }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let buffer = unwrapInboundIn(data)
        let requests = buffer.withUnsafeReadableBytes { raw in raw.reduce(0) { $1 == 0 ? $0 + 1 : $0 } }
        guard requests > 0 else { return }
        var out = context.channel.allocator.buffer(capacity: reply.readableBytes * requests)
        for _ in 0..<requests { out.writeImmutableBuffer(reply) }
        context.write(wrapOutboundOut(out), promise: nil)
        pending = true
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        if pending {
            pending = false
            context.flush()
        }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if case ChannelEvent.inputClosed = event { context.close(promise: nil) }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) { context.close(promise: nil) }
}

/// What tokend reads before a connection's first call, read the same way; the pidfd is closed
/// with the connection.
func readPeerCredentials(_ channel: any Channel) -> EventLoopFuture<Void> {
    guard let provider = channel as? any SocketOptionProvider else { return channel.eventLoop.makeSucceededVoidFuture() }
    let level = SocketOptionLevel(SOL_SOCKET)
    struct UCred {
        var pid: Int32 = 0
        var uid: UInt32 = 0
        var gid: UInt32 = 0
    }
    let credentials: EventLoopFuture<UCred> = provider.unsafeGetSocketOption(level: level, name: 17)
    return credentials.flatMap { _ in
        let groups: EventLoopFuture<InlineArray<256, UInt32>> = provider.unsafeGetSocketOption(level: level, name: 59)
        return groups.map { _ in () }.recover { _ in () }
    }.flatMap {
        let pidfd: EventLoopFuture<Int32> = provider.unsafeGetSocketOption(level: level, name: 77)
        return pidfd.map { fd in
            if fd >= 0 { channel.closeFuture.whenComplete { _ in close(fd) } }
        }.recover { _ in () }
    }
}

/// Writes `message` and a newline to stderr.
func complain(_ message: String) {
    let line = Array((message + "\n").utf8)
    _ = line.withUnsafeBytes { write(2, $0.baseAddress, $0.count) }
}

guard let options = Options.parse(Array(CommandLine.arguments.dropFirst())) else {
    complain("usage: nio-floor [--quiet] [--mode M] [--threads N] [--reply-bytes N] [--max-seconds S] [--peer-credentials] PATH")
    exit(2)
}

var replyBytes = Array(#"{"parameters":{"floor":""#.utf8)
replyBytes += Array(repeating: UInt8(ascii: "x"), count: max(0, options.replyBytes - replyBytes.count - 4))
replyBytes += Array(#""}}"#.utf8)
replyBytes = Array(replyBytes.prefix(options.replyBytes - 1)) + [0]
let reply = ByteBuffer(bytes: replyBytes)
let peerCredentials = options.peerCredentials

let group = MultiThreadedEventLoopGroup(numberOfThreads: options.threads)
let bootstrap = ServerBootstrap(group: group)
    .serverChannelOption(.backlog, value: 1024)
    .childChannelInitializer { channel in
        do {
            let channelOptions = channel.syncOptions
            try channelOptions?.setOption(.writeBufferWaterMark, value: .init(low: 32 * 1024, high: 256 * 1024))
            try channelOptions?.setOption(.maxMessagesPerRead, value: 16)
            try channelOptions?.setOption(.allowRemoteHalfClosure, value: true)
        } catch {
            return channel.eventLoop.makeFailedFuture(error)
        }
        let ready = peerCredentials ? readPeerCredentials(channel) : channel.eventLoop.makeSucceededVoidFuture()
        return ready.flatMapThrowing { try channel.pipeline.syncOperations.addHandler(CannedReplyHandler(reply: reply)) }
    }

// Bound under a temporary name, then renamed: a client that sees PATH can connect.
let temporaryPath = options.path + ".tmp"
unlink(temporaryPath)
let server = try await bootstrap.bind(unixDomainSocketPath: temporaryPath).get()
guard rename(temporaryPath, options.path) == 0 else {
    complain("nio-floor: cannot rename \(temporaryPath) to \(options.path)")
    exit(1)
}
let maxSeconds = options.maxSeconds
group.next().scheduleTask(in: .seconds(Int64(maxSeconds))) { exit(0) }
try await server.closeFuture.get()

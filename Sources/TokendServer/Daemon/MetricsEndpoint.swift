import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import Prometheus
import TokendConfig

#if canImport(Glibc)
    import Glibc
#endif

/// Renders the Prometheus text format, bringing the computed gauges up to date first.
struct MetricsExporter: Sendable {
    let registry: PrometheusCollectorRegistry
    let updateGauges: @Sendable () -> Void

    func render() -> [UInt8] {
        updateGauges()
        return registry.emitToBuffer()
    }
}

/// The optional HTTP endpoint: `GET /metrics` on a loopback address or a Unix socket.
enum MetricsEndpoint {
    static let contentType = "text/plain; version=0.0.4; charset=utf-8"

    /// Starts listening.
    ///
    /// - Returns: The listening channel, and the socket file it created (removed at stop).
    static func start(
        _ listen: MetricsConfiguration.Listen, exporter: MetricsExporter, group: any EventLoopGroup
    ) async throws -> (channel: any Channel, socketFile: OwnedSocketFile?) {
        let bootstrap = ServerBootstrap(group: group)
            .serverChannelOption(.backlog, value: 64)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                channel.pipeline.configureHTTPServerPipeline(withErrorHandling: true).flatMapThrowing {
                    try channel.pipeline.syncOperations.addHandler(MetricsHTTPHandler(exporter: exporter))
                }
            }
        switch listen {
        case .tcp(let host, let port):
            return (try await bootstrap.bind(host: host, port: port).get(), nil)
        case .unix(let path):
            try SocketListener.removeStaleSocket(at: path)
            // Metrics are not secret (counts by state, provider, method); any local collector may read them.
            let placed = try UnixSocketFile.listen(at: path, mode: 0o666, backlog: 64)
            do {
                return (try await bootstrap.withBoundSocket(placed.descriptor).get(), placed.file)
            } catch {
                close(placed.descriptor)
                placed.file.remove()
                throw error
            }
        }
    }
}

/// Answers `GET /metrics` (and `HEAD`), one request per connection.
final class MetricsHTTPHandler: ChannelInboundHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    private let exporter: MetricsExporter
    private var head: HTTPRequestHead?

    init(exporter: MetricsExporter) { self.exporter = exporter }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let request): head = request
        case .body: break
        case .end:
            guard let request = head else { return }
            head = nil
            respond(to: request, context: context)
        }
    }

    private func respond(to request: HTTPRequestHead, context: ChannelHandlerContext) {
        let path = request.uri.split(separator: "?", maxSplits: 1).first.map(String.init) ?? request.uri
        let status: HTTPResponseStatus
        var body: [UInt8]
        var contentType = "text/plain; charset=utf-8"
        switch (request.method, path) {
        case (.GET, "/metrics"), (.HEAD, "/metrics"):
            status = .ok
            body = exporter.render()
            contentType = MetricsEndpoint.contentType
        case (.GET, "/"), (.HEAD, "/"):
            status = .ok
            body = Array("tokend metrics: /metrics\n".utf8)
        case (.GET, _), (.HEAD, _):
            status = .notFound
            body = Array("not found\n".utf8)
        default:
            status = .methodNotAllowed
            body = Array("only GET\n".utf8)
        }
        var headers = HTTPHeaders()
        headers.add(name: "Content-Type", value: contentType)
        headers.add(name: "Content-Length", value: String(body.count))
        headers.add(name: "Connection", value: "close")
        if status == .methodNotAllowed { headers.add(name: "Allow", value: "GET, HEAD") }
        if request.method == .HEAD { body = [] }
        context.write(
            wrapOutboundOut(.head(HTTPResponseHead(version: request.version, status: status, headers: headers))),
            promise: nil)
        if !body.isEmpty {
            var buffer = context.channel.allocator.buffer(capacity: body.count)
            buffer.writeBytes(body)
            context.write(wrapOutboundOut(.body(.byteBuffer(buffer))), promise: nil)
        }
        let loopBound = NIOLoopBound(context, eventLoop: context.eventLoop)
        context.writeAndFlush(wrapOutboundOut(.end(nil))).whenComplete { _ in loopBound.value.close(promise: nil) }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }
}

@available(*, unavailable)
extension MetricsHTTPHandler: Sendable {}

/// A socket file this process created, removed at stop only if it is still the same file (a
/// newer instance may already have replaced it). Sockets passed by the service manager are
/// never removed: they belong to the socket unit.
struct OwnedSocketFile: Sendable {
    let path: String
    private let device: UInt64
    private let inode: UInt64

    /// The file at `path` that was (device, inode) when this process made it.
    init(path: String, device: UInt64, inode: UInt64) {
        self.path = path
        self.device = device
        self.inode = inode
    }

    func remove() {
        var info = stat()
        guard lstat(path, &info) == 0, UInt64(info.st_dev) == device, UInt64(info.st_ino) == inode else { return }
        unlink(path)
    }
}

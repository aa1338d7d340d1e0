import AsyncHTTPClient
import NIOCore
import NIOPosix
import NIOSSL
import Synchronization

/// One shared `HTTPClient` for every provider that trusts the system's CAs, and one per extra
/// CA file: TLS trust is a property of the client in AsyncHTTPClient, so providers with the
/// same trust share pooled connections.
public final class HTTPClientPool: Sendable {
    public struct Timeouts: Sendable, Hashable {
        public var connect: Duration
        public var request: Duration
        public init(connect: Duration = .seconds(5), request: Duration = .seconds(15)) {
            self.connect = connect
            self.request = request
        }
    }

    public let timeouts: Timeouts
    /// Connections per host: the most `max_grants_in_flight` accepts.
    static let connectionsPerHost = 10_000
    private let group: any EventLoopGroup
    private let clients = Mutex<[String: HTTPClient]>([:])

    public init(timeouts: Timeouts = Timeouts(), group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton) {
        self.timeouts = timeouts
        self.group = group
    }

    /// The client for a provider with an optional extra CA file.
    public func client(caFile: String?) -> HTTPClient {
        clients.withLock { clients in
            let key = caFile ?? ""
            if let client = clients[key] { return client }
            var tls = TLSConfiguration.makeClientConfiguration()
            if let caFile { tls.additionalTrustRoots = [.file(caFile)] }
            var configuration = HTTPClient.Configuration(
                tlsConfiguration: tls,
                // Never follow redirects: a 307/308 would resend the refresh token to wherever
                // the Location header points.
                redirectConfiguration: .disallow,
                timeout: .init(connect: .milliseconds(timeouts.connect.milliseconds), read: .milliseconds(timeouts.request.milliseconds))
            )
            configuration.connectionPool.idleTimeout = .seconds(60)
            // AsyncHTTPClient opens at most 8 connections per host by default, which would
            // silently lower a `max_grants_in_flight` above 8. tokend's own grant slots are the
            // limit (and reloadable); this one only has to stay out of their way.
            configuration.connectionPool.concurrentHTTP1ConnectionsPerHostSoftLimit = Self.connectionsPerHost
            // No request spans: tokend has no tracer, and even the no-op one costs a dynamic
            // cast and a span per grant.
            configuration.tracing.tracer = nil
            let client = HTTPClient(eventLoopGroup: group, configuration: configuration)
            clients[key] = client
            return client
        }
    }

    public func shutdown() async {
        let all = clients.withLock { clients in
            defer { clients.removeAll() }
            return Array(clients.values)
        }
        for client in all { try? await client.shutdown() }
    }
}

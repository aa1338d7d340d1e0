import AsyncHTTPClient
import NIOCore
import NIOPosix
import NIOSSL
import Synchronization
import TokendConfig
import TokendCore

/// One shared `HTTPClient` for every provider that trusts the system's CAs, and one per extra
/// CA file: TLS trust is a property of the client in AsyncHTTPClient, so providers with the
/// same trust share pooled connections.
///
/// By default the clients run on an event loop of their own, which does nothing but talk to
/// providers: requests, their connections and their answers all stay on that one thread (no
/// hops between loops inside AsyncHTTPClient), and the loop can be paced in a refresh storm
/// (``StormPacer``) without delaying anything else — local clients are served on other loops.
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
    /// Paces the clients' loop in a refresh storm; nil when the loop is shared (not ours to nap).
    public let pacer: StormPacer?
    /// Connections per host: the most `max_grants_in_flight` accepts.
    static let connectionsPerHost = 10_000
    private let group: any EventLoopGroup
    /// Refresh grants' token POSTs (``FormPostClient``), on the same loop as the clients.
    let formPosts: FormPostClient
    private let clients = Mutex<[ClientKey: HTTPClient]>([:])
    /// The proxy variables of the daemon's environment, for providers that follow them.
    public let proxies: ProxyEnvironment
    /// The latest DPoP nonce of each server that hands them out, shared by every request to it.
    let dpopNonces = DPoPNonces()

    /// What sets one `HTTPClient` apart from another: the trust and the proxy.
    private struct ClientKey: Hashable {
        var caFile: String
        var proxy: ProxyServer?
        var identity: TLSClientIdentity?
    }

    /// - Parameter group: The loops to run the clients on; nil (the default) makes one loop
    ///   for them alone, which storm pacing needs.
    public init(timeouts: Timeouts = Timeouts(), group: (any EventLoopGroup)? = nil, proxies: ProxyEnvironment = ProxyEnvironment()) {
        self.timeouts = timeouts
        self.proxies = proxies
        if let group {
            self.group = group
            self.pacer = nil
        } else {
            let pacer = StormPacer()
            self.group = MultiThreadedEventLoopGroup(numberOfThreads: 1, metricsDelegate: pacer)
            self.pacer = pacer
        }
        formPosts = FormPostClient(group: self.group, connectTimeout: timeouts.connect, proxies: proxies)
    }

    /// The client for a request to `url` from a provider with an optional extra CA file and its
    /// proxy setting (the route depends on the URL: `no_proxy`, cleartext loopback).
    /// `identity`: the TLS client certificate to present (mutual TLS), if the provider has one.
    public func client(for url: String, caFile: String?, proxy: ProxySetting, identity: TLSClientIdentity? = nil) -> HTTPClient {
        let route = FormPostTarget(url).flatMap { proxies.route(scheme: $0.tls ? "https" : "http", host: $0.host, setting: proxy) }
        return clients.withLock { clients in
            let key = ClientKey(caFile: caFile ?? "", proxy: route, identity: identity)
            if let client = clients[key] { return client }
            var tls = TLSConfiguration.makeClientConfiguration()
            if let caFile { tls.additionalTrustRoots = [.file(caFile)] }
            // Checked when the configuration was loaded; a file that broke since fails the request.
            try? identity?.apply(to: &tls)
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
            if let route {
                // A CONNECT tunnel (AsyncHTTPClient tunnels https through an HTTP proxy).
                configuration.proxy = .server(
                    host: route.host, port: route.port,
                    authorization: route.credentials.map { .basic(credentials: FormEncoding.base64(Array($0.value.utf8))) })
            }
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
        await formPosts.shutdown()
        // Only a pool that made its own loop paces it, so the pacer marks the group as ours.
        if pacer != nil { try? await group.shutdownGracefully() }
    }
}

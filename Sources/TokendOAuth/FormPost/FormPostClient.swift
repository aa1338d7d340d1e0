import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL
import Synchronization
import TokendConfig
import TokendCore

/// An HTTP/1.1 client for the one request tokend sends thousands of times: a form POST to a
/// token endpoint, answered with a small body. Built on SwiftNIO's HTTP codec and NIOSSL, with
/// kept-alive connections reused per endpoint.
///
/// Why not AsyncHTTPClient, which tokend uses for every other request: in a refresh storm its
/// general machinery (request bags, connection-pool state machines, generic delegate plumbing)
/// was most of the CPU a grant cost on the HTTP loop and a fifth of the rest (measured with
/// perf: ~0.2 of ~0.6 ms per grant). This client does only what a token POST needs: connect
/// (TLS with the provider's trust), write one request, collect one bounded answer, keep the
/// connection if the server does. It also knows whether a failed request went out at all,
/// which decides if a rotated refresh token may have been lost (``FormPostFailure``).
///
/// Never follows redirects (a 307 would resend the refresh token elsewhere). Reaches https
/// endpoints through an HTTP proxy when the provider's setting or the environment says so
/// (a `CONNECT` tunnel, ``ProxyTunnelHandler``), as AsyncHTTPClient does for the other requests.
final class FormPostClient: Sendable {
    private let group: any EventLoopGroup
    private let connectTimeout: Duration
    private let proxies: ProxyEnvironment
    private let state = Mutex(PoolState())
    /// TLS contexts by CA file ("" for the system's trust) and client identity: building one
    /// reads the trust store.
    private let tlsContexts = Mutex<[TLSContextKey: NIOSSLContext]>([:])

    private struct TLSContextKey: Hashable {
        var caFile: String
        var identity: TLSClientIdentity?
    }

    /// Idle connections kept per endpoint, at most; more are closed when they come back.
    static let maximumIdlePerEndpoint = 64
    /// An idle connection older than this is closed rather than reused: servers drop idle
    /// connections on their own timers, and a request racing such a close is lost.
    static let maximumIdleTime = TimeAmount.seconds(30)

    private struct Key: Hashable {
        var tls: Bool
        var host: String
        var port: Int
        var caFile: String
        /// The proxy the connection tunnels through, if any.
        var proxy: ProxyServer?
        /// The client certificate the connection presented: a connection authenticated as one
        /// client is never reused for another.
        var identity: TLSClientIdentity?
    }

    private struct IdleConnection: Sendable {
        var channel: any Channel
        var since: NIODeadline
    }

    private struct PoolState {
        var idle: [Key: [IdleConnection]] = [:]
        var targets: [String: FormPostTarget] = [:]
        var shutDown = false
    }

    init(group: any EventLoopGroup, connectTimeout: Duration, proxies: ProxyEnvironment = ProxyEnvironment()) {
        self.group = group
        self.connectTimeout = connectTimeout
        self.proxies = proxies
    }

    /// POSTs `body` (already form-encoded) with `headers` to `url`; the answer's body may be at
    /// most `maximumBodyBytes`. Everything, connecting included, ends by `deadline`.
    func post(
        url: String, headers: [(String, String)], body: String, caFile: String?, proxy: ProxySetting = .environment,
        identity: TLSClientIdentity? = nil, maximumBodyBytes: Int, deadline: NIODeadline
    ) async throws(FormPostFailure) -> FormPostResponse {
        let target = try target(for: url)
        let route = proxies.route(scheme: target.tls ? "https" : "http", host: target.host, setting: proxy)
        let key = Key(tls: target.tls, host: target.host, port: target.port, caFile: caFile ?? "", proxy: route, identity: identity)
        let channel = try await connection(for: key, target: target, deadline: deadline)
        var buffer = channel.allocator.buffer(capacity: body.utf8.count)
        buffer.writeString(body)
        let promise = channel.eventLoop.makePromise(of: FormPostConnectionHandler.Answer.self)
        let exchange = FormPostExchange(
            head: target.head(headers: headers, bodyLength: buffer.readableBytes), body: buffer,
            maximumBodyBytes: maximumBodyBytes, deadline: deadline, promise: promise
        )
        channel.writeAndFlush(exchange, promise: nil)
        let answer = try await Self.value(of: promise.futureResult, closingOnFailure: channel, otherwise: .other, requestSent: true)
        if answer.keepAlive { checkIn(channel, key: key) }
        return answer.response
    }

    /// Closes every idle connection; later posts fail.
    func shutdown() async {
        let idle = state.withLock { state in
            state.shutDown = true
            defer { state.idle.removeAll() }
            return state.idle.values.flatMap { $0 }
        }
        for connection in idle { try? await connection.channel.close() }
    }

    /// The number of idle connections kept that are still open (for tests).
    var idleConnectionCount: Int { state.withLock { $0.idle.values.reduce(0) { $0 + $1.filter(\.channel.isActive).count } } }

    // MARK: Connections

    private func target(for url: String) throws(FormPostFailure) -> FormPostTarget {
        if let known = state.withLock({ $0.targets[url] }) { return known }
        guard let parsed = FormPostTarget(url) else {
            throw FormPostFailure(kind: .badURL, requestSent: false, detail: "\"\(url)\" is not an absolute http(s) URL")
        }
        state.withLock { state in
            if state.targets.count >= 64 { state.targets.removeAll() }
            state.targets[url] = parsed
        }
        return parsed
    }

    /// A kept connection to `key` that is still open, or a new one.
    private func connection(for key: Key, target: FormPostTarget, deadline: NIODeadline) async throws(FormPostFailure) -> any Channel {
        let now = NIODeadline.now()
        let (reused, stale, shutDown) = state.withLock { state -> ((any Channel)?, [any Channel], Bool) in
            guard !state.shutDown else { return (nil, [], true) }
            var stale: [any Channel] = []
            var found: (any Channel)?
            while found == nil, let candidate = state.idle[key]?.popLast() {
                if candidate.channel.isActive, now - candidate.since < Self.maximumIdleTime {
                    found = candidate.channel
                } else {
                    stale.append(candidate.channel)
                }
            }
            return (found, stale, false)
        }
        for channel in stale { channel.close(promise: nil) }
        if shutDown { throw FormPostFailure(kind: .shutDown, requestSent: false, detail: "tokend is stopping") }
        if let reused { return reused }
        return try await connect(key: key, target: target, deadline: deadline)
    }

    private func checkIn(_ channel: any Channel, key: Key) {
        let kept = state.withLock { state -> Bool in
            guard !state.shutDown, channel.isActive, state.idle[key, default: []].count < Self.maximumIdlePerEndpoint else { return false }
            state.idle[key, default: []].append(IdleConnection(channel: channel, since: .now()))
            return true
        }
        if !kept { channel.close(promise: nil) }
    }

    private func connect(key: Key, target: FormPostTarget, deadline: NIODeadline) async throws(FormPostFailure) -> any Channel {
        let sslContext = key.tls ? try tlsContext(caFile: key.caFile, identity: key.identity) : nil
        let loop = group.next()
        let connectBy = min(
            deadline,
            .now()
                + .nanoseconds(
                    Int64(connectTimeout.components.seconds) * 1_000_000_000 + connectTimeout.components.attoseconds / 1_000_000_000))
        let ready = loop.makePromise(of: Void.self)
        // Through a proxy, the provider's handlers go in once the tunnel is open.
        let tunnel = key.proxy.map { (proxy: $0, established: loop.makePromise(of: Void.self)) }
        let providerHandlers: @Sendable (any Channel) throws -> Void = { channel in
            let sync = channel.pipeline.syncOperations
            if let sslContext {
                try sync.addHandler(NIOSSLClientHandler(context: sslContext, serverHostname: target.serverName))
            }
            try sync.addHTTPClientHandlers()
            try sync.addHandler(FormPostConnectionHandler(tls: sslContext != nil, ready: ready, readyDeadline: connectBy))
        }
        let bootstrap = ClientBootstrap(group: loop)
            .connectTimeout(max(.milliseconds(1), connectBy - .now()))
            .channelOption(.socketOption(.tcp_nodelay), value: 1)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    if let tunnel {
                        let sync = channel.pipeline.syncOperations
                        try sync.addHandler(HTTPRequestEncoder(), name: Self.proxyEncoder)
                        try sync.addHandler(
                            ByteToMessageHandler(HTTPResponseDecoder(leftOverBytesStrategy: .fireError)), name: Self.proxyDecoder)
                        try sync.addHandler(
                            ProxyTunnelHandler(
                                proxy: tunnel.proxy, target: target.authority, established: tunnel.established, deadline: connectBy),
                            name: Self.proxyTunnel)
                    } else {
                        try providerHandlers(channel)
                    }
                }
            }
        let channel: any Channel
        do {
            channel = try await bootstrap.connect(host: key.proxy?.host ?? target.host, port: key.proxy?.port ?? target.port).get()
        } catch {
            ready.fail(error)
            tunnel?.established.fail(error)
            if let proxy = key.proxy {
                throw FormPostFailure(
                    kind: .proxy, requestSent: false, detail: "cannot reach the proxy \(proxy): \(Self.describeCause(error))")
            }
            throw FormPostFailure(kind: .connect, requestSent: false, detail: Self.describeConnectError(error))
        }
        if let tunnel {
            do {
                try await Self.value(of: tunnel.established.futureResult, closingOnFailure: channel, otherwise: .proxy, requestSent: false)
            } catch {
                ready.fail(error)  // never to be used; a promise must not be left pending
                throw error
            }
            // The proxy's HTTP handlers go first (all of them: the TLS handler's first write must
            // meet no HTTP encoder on its way out), then the provider's handlers come in.
            let removals = [Self.proxyTunnel, Self.proxyDecoder, Self.proxyEncoder].map { channel.pipeline.removeHandler(name: $0) }
            let swapped = EventLoopFuture.andAllSucceed(removals, on: channel.eventLoop).flatMapThrowing { try providerHandlers(channel) }
            do {
                try await swapped.get()
            } catch {
                ready.fail(error)
                channel.close(promise: nil)
                throw FormPostFailure(kind: .proxy, requestSent: false, detail: "the tunnel through \(key.proxy!) failed: \(error)")
            }
        }
        try await Self.value(of: ready.futureResult, closingOnFailure: channel, otherwise: .tls, requestSent: false)
        return channel
    }

    private static let proxyEncoder = "tokend.proxy.encoder"
    private static let proxyDecoder = "tokend.proxy.decoder"
    private static let proxyTunnel = "tokend.proxy.tunnel"

    /// The future's value. On failure the connection is closed, and an error that is not a
    /// ``FormPostFailure`` already becomes one of `kind`.
    private static func value<Value: Sendable>(
        of future: EventLoopFuture<Value>, closingOnFailure channel: any Channel, otherwise kind: FormPostFailure.Kind, requestSent: Bool
    ) async throws(FormPostFailure) -> Value {
        do {
            return try await future.get()
        } catch {
            channel.close(promise: nil)
            throw error as? FormPostFailure
                ?? FormPostFailure(kind: kind, requestSent: requestSent, detail: FormPostConnectionHandler.describe(error))
        }
    }

    private func tlsContext(caFile: String, identity: TLSClientIdentity?) throws(FormPostFailure) -> NIOSSLContext {
        let contextKey = TLSContextKey(caFile: caFile, identity: identity)
        if let known = tlsContexts.withLock({ $0[contextKey] }) { return known }
        var configuration = TLSConfiguration.makeClientConfiguration()
        if !caFile.isEmpty { configuration.additionalTrustRoots = [.file(caFile)] }
        do {
            try identity?.apply(to: &configuration)
            let context = try NIOSSLContext(configuration: configuration)
            tlsContexts.withLock { $0[contextKey] = context }
            return context
        } catch {
            throw FormPostFailure(
                kind: .tls, requestSent: false,
                detail: "the TLS configuration for the token endpoint is unusable: \(String(describing: error).prefix(200))")
        }
    }

    static func describeConnectError(_ error: any Error) -> String {
        if case ChannelError.connectTimeout = error { return "connecting to the token endpoint timed out" }
        return "cannot reach the token endpoint: \(describeCause(error))"
    }

    static func describeCause(_ error: any Error) -> String {
        if case ChannelError.connectTimeout = error { return "connecting timed out" }
        return String(String(describing: error).prefix(200))
    }
}

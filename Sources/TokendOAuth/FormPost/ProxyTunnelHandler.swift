import NIOCore
import NIOHTTP1
import TokendCore

/// A handler that starts its work when the connection is up: when it becomes active, or at
/// once if it is added to a connection already active (after a proxy's tunnel opened).
protocol StartsWhenActive: ChannelInboundHandler {
    func channelBecameActive(context: ChannelHandlerContext)
}

extension StartsWhenActive {
    func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { channelBecameActive(context: context) }
    }

    func channelActive(context: ChannelHandlerContext) {
        channelBecameActive(context: context)
        context.fireChannelActive()
    }
}

/// Opens an HTTP `CONNECT` tunnel (RFC 9110 §9.3.6) through a proxy to a provider's host and
/// port; once the proxy answers 2xx, the connection carries TLS to the provider. Sits after
/// NIO's HTTP encoder and decoder, which ``FormPostClient`` removes with it once the tunnel is
/// up. Nothing of the provider's request has been sent while it runs, so every failure here
/// leaves the refresh token unspent.
final class ProxyTunnelHandler: StartsWhenActive, RemovableChannelHandler {
    typealias InboundIn = HTTPClientResponsePart
    typealias OutboundOut = HTTPClientRequestPart

    private let proxy: ProxyServer
    private let target: String
    private var established: EventLoopPromise<Void>?
    private let deadline: NIODeadline
    private var timeout: Scheduled<Void>?
    private var status: HTTPResponseStatus?

    /// - Parameter target: `host:port` of the provider (IPv6 in brackets).
    init(proxy: ProxyServer, target: String, established: EventLoopPromise<Void>, deadline: NIODeadline) {
        self.proxy = proxy
        self.target = target
        self.established = established
        self.deadline = deadline
    }

    /// Sends the `CONNECT` once the connection is up (``StartsWhenActive``).
    func channelBecameActive(context: ChannelHandlerContext) {
        guard timeout == nil, established != nil else { return }
        let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        timeout = context.eventLoop.scheduleTask(deadline: deadline) {
            let (handler, context) = loopBound.value
            handler.fail("the proxy \(handler.proxy) did not open a tunnel to \(handler.target) in time")
            context.close(promise: nil)
        }
        var headers = HTTPHeaders()
        headers.add(name: "Host", value: target)
        headers.add(name: "User-Agent", value: "tokend")
        if let credentials = proxy.credentials {
            headers.add(name: "Proxy-Authorization", value: "Basic " + FormEncoding.base64(Array(credentials.value.utf8)))
        }
        context.write(
            wrapOutboundOut(.head(HTTPRequestHead(version: .http1_1, method: .CONNECT, uri: target, headers: headers))), promise: nil)
        context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            status = head.status
        case .body:
            break
        case .end:
            guard let status, (200..<300).contains(status.code) else {
                let answer = status.map { "\($0.code) \($0.reasonPhrase)" } ?? "no answer"
                // 407 asks for credentials; some proxies (tinyproxy) answer wrong ones with 401.
                let hint =
                    status?.code == 407 || status?.code == 401 ? " (check proxy_credentials_file or the proxy URL's user and password)" : ""
                fail("the proxy \(proxy) refused the tunnel to \(target): \(answer)\(hint)")
                context.close(promise: nil)
                return
            }
            timeout?.cancel()
            established?.succeed(())
            established = nil
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        fail("the proxy \(proxy) closed the connection before the tunnel to \(target) was open")
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        fail("the proxy \(proxy) failed: \(FormPostConnectionHandler.describe(error))")
        context.close(promise: nil)
    }

    private func fail(_ detail: String) {
        timeout?.cancel()
        established?.fail(FormPostFailure(kind: .proxy, requestSent: false, detail: detail))
        established = nil
    }
}

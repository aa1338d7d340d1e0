import NIOCore
import NIOHTTP1
import NIOSSL
import NIOTLS

/// A form POST handed to a connection: written by ``FormPostConnectionHandler``, which
/// completes `promise` with the whole answer or a ``FormPostFailure``.
struct FormPostExchange: Sendable {
    var head: HTTPRequestHead
    var body: ByteBuffer
    var maximumBodyBytes: Int
    var deadline: NIODeadline
    var promise: EventLoopPromise<FormPostConnectionHandler.Answer>
}

/// One HTTP/1.1 connection to a token endpoint, one exchange at a time: sends the request it
/// is written (a ``FormPostExchange``), collects the answer, and says whether the connection
/// can carry another. Sits after NIO's HTTP client codec (and TLS); everything runs on the
/// connection's loop.
final class FormPostConnectionHandler: ChannelDuplexHandler, StartsWhenActive, RemovableChannelHandler {
    typealias InboundIn = HTTPClientResponsePart
    typealias OutboundIn = FormPostExchange
    typealias OutboundOut = HTTPClientRequestPart

    struct Answer: Sendable {
        var response: FormPostResponse
        /// The server keeps the connection open for another request.
        var keepAlive: Bool
    }

    private enum State {
        /// TCP connected, TLS (if any) still shaking hands.
        case connecting
        case idle
        case exchanging
        case closed
    }

    private var state = State.connecting
    private let tls: Bool
    /// Completed once the connection can carry a request (after the TLS handshake).
    private var ready: EventLoopPromise<Void>?
    private let readyDeadline: NIODeadline
    private var exchange: FormPostExchange?
    private var timeout: Scheduled<Void>?
    private var responseHead: HTTPResponseHead?
    private var body: [UInt8] = []

    init(tls: Bool, ready: EventLoopPromise<Void>, readyDeadline: NIODeadline) {
        self.tls = tls
        self.ready = ready
        self.readyDeadline = readyDeadline
    }

    func channelBecameActive(context: ChannelHandlerContext) {
        guard state == .connecting else { return }
        if !tls {
            becomeReady()
            return
        }
        // A handshake that never finishes must not hold the grant past its deadline.
        let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        timeout = context.eventLoop.scheduleTask(deadline: readyDeadline) {
            let (handler, context) = loopBound.value
            guard handler.state == .connecting else { return }
            handler.failReady(
                FormPostFailure(kind: .tls, requestSent: false, detail: "the TLS handshake with the token endpoint timed out"))
            context.close(promise: nil)
        }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if case .handshakeCompleted = event as? TLSUserEvent, state == .connecting {
            timeout?.cancel()
            timeout = nil
            becomeReady()
        }
        context.fireUserInboundEventTriggered(event)
    }

    private func becomeReady() {
        state = .idle
        ready?.succeed(())
        ready = nil
    }

    private func failReady(_ failure: FormPostFailure) {
        state = .closed
        ready?.fail(failure)
        ready = nil
    }

    // MARK: Sending

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        let exchange = unwrapOutboundIn(data)
        promise?.succeed(())
        guard state == .idle else {
            exchange.promise.fail(FormPostFailure(kind: .closed, requestSent: false, detail: "the token endpoint closed the connection"))
            return
        }
        state = .exchanging
        self.exchange = exchange
        responseHead = nil
        body.removeAll(keepingCapacity: true)
        let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        timeout = context.eventLoop.scheduleTask(deadline: exchange.deadline) {
            let (handler, context) = loopBound.value
            guard handler.state == .exchanging else { return }
            handler.finishExchange(
                with: .failure(FormPostFailure(kind: .timeout, requestSent: true, detail: "the token endpoint did not answer in time")))
            context.close(promise: nil)
        }
        context.write(wrapOutboundOut(.head(exchange.head)), promise: nil)
        context.write(wrapOutboundOut(.body(.byteBuffer(exchange.body))), promise: nil)
        context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
    }

    // MARK: Receiving

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let part = unwrapInboundIn(data)
        guard state == .exchanging, let exchange else {
            // An answer nobody asked for (a server's 408 before it closes an idle connection):
            // this connection carries no more requests.
            state = .closed
            context.close(promise: nil)
            return
        }
        switch part {
        case .head(let head):
            // Interim answers (100 Continue) come before the real one.
            if (100..<200).contains(head.status.code), head.status != .switchingProtocols { return }
            responseHead = head
        case .body(let buffer):
            guard body.count + buffer.readableBytes <= exchange.maximumBodyBytes else {
                finishExchange(
                    with: .failure(
                        FormPostFailure(
                            kind: .tooBig, requestSent: true,
                            detail: "the token endpoint's answer is larger than \(exchange.maximumBodyBytes / 1024) KiB")))
                state = .closed
                context.close(promise: nil)
                return
            }
            body.append(contentsOf: buffer.readableBytesView)
        case .end:
            guard let head = responseHead else {
                finishExchange(
                    with: .failure(FormPostFailure(kind: .other, requestSent: true, detail: "the token endpoint sent no response head")))
                state = .closed
                context.close(promise: nil)
                return
            }
            let keepAlive = head.isKeepAlive
            let response = FormPostResponse(
                status: Int(head.status.code), retryAfter: head.headers.first(name: "Retry-After"),
                dpopNonce: head.headers.first(name: "DPoP-Nonce"), body: body)
            finishExchange(with: .success(Answer(response: response, keepAlive: keepAlive)))
            if keepAlive {
                state = .idle
            } else {
                state = .closed
                context.close(promise: nil)
            }
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        switch state {
        case .connecting:
            failReady(
                FormPostFailure(
                    kind: tls ? .tls : .connect, requestSent: false,
                    detail: "the token endpoint closed the connection before it could be used"))
        case .exchanging:
            finishExchange(
                with: .failure(FormPostFailure(kind: .closed, requestSent: true, detail: "the token endpoint closed the connection")))
        case .idle, .closed:
            break
        }
        state = .closed
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        switch state {
        case .connecting:
            failReady(FormPostFailure(kind: tls ? .tls : .connect, requestSent: false, detail: Self.describe(error)))
        case .exchanging:
            finishExchange(with: .failure(FormPostFailure(kind: .other, requestSent: true, detail: Self.describe(error))))
        case .idle, .closed:
            break
        }
        state = .closed
        context.close(promise: nil)
    }

    private func finishExchange(with result: Result<Answer, FormPostFailure>) {
        timeout?.cancel()
        timeout = nil
        guard let exchange else { return }
        self.exchange = nil
        body = []
        switch result {
        case .success(let answer): exchange.promise.succeed(answer)
        case .failure(let failure): exchange.promise.fail(failure)
        }
    }

    /// A short description of a connection error; TLS failures name themselves.
    static func describe(_ error: any Error) -> String {
        let text = String(describing: error)
        if error is NIOSSLError || text.contains("CERTIFICATE_VERIFY_FAILED") || text.contains("handshakeFailed") {
            return "TLS handshake with the token endpoint failed (certificate not trusted?): \(text.prefix(200))"
        }
        return "the connection to the token endpoint failed: \(text.prefix(200))"
    }
}

import NIOCore
import Synchronization
import TokendProtocol

/// A call handed to the pipeline: what to send and whom to tell about the replies.
struct OutboundCall: Sendable {
    /// Identifies the call for ``VarlinkClientHandler/AbandonCall``.
    var id: UInt64
    var call: VarlinkCall
    /// How long the call may wait for its last reply; `nil` waits as long as the connection
    /// lives (for calls that stream on a connection of their own).
    var timeout: TimeAmount?
    /// Completed with every reply of the call (one, or several for `more`; none for `oneway`).
    /// With ``onReply``, completed with `[]` once the last reply was handed over.
    var promise: EventLoopPromise<[VarlinkReply]>
    /// When set, each reply is handed over as it arrives (on the event loop) instead of being
    /// collected: for `more` calls that stream for as long as the connection lives (`Watch`).
    var onReply: (@Sendable (VarlinkReply) -> Void)? = nil
}

/// The error tokend answered a connection with before any call was sent on it: a refusal at
/// accept (a connection quota reached, a socket the caller may not use), after which tokend
/// closes the connection. Kept for the calls made on the connection, which get it as their
/// reply: under load the refusal can arrive, and the connection close, before the first call is
/// even written, and that caller must learn why, not only that the connection was closed.
final class RefusalAtAccept: Sendable {
    private let reply = Mutex<VarlinkReply?>(nil)

    init() {}

    /// Keeps `reply`, the first such one.
    func keep(_ reply: VarlinkReply) {
        self.reply.withLock { kept in
            if kept == nil { kept = reply }
        }
    }

    /// The refusal, if the connection was refused.
    var value: VarlinkReply? { reply.withLock { $0 } }
}

/// Matches replies to calls on one connection.
///
/// Varlink answers the calls on a connection in the order they were sent, so the handler keeps
/// the calls that still wait for replies in a FIFO: a reply belongs to the oldest waiting call,
/// which is complete with a reply that does not `continue` (or with an error). A `oneway` call
/// is complete once written.
///
/// Anything that could desynchronise the FIFO ends the connection and fails every waiting call:
/// a reply nobody waits for, a reply that is not valid Varlink, a timeout (its reply might still
/// come and would be taken for the next call's), the connection closing.
final class VarlinkClientHandler: ChannelDuplexHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundIn = OutboundCall
    typealias OutboundOut = ByteBuffer

    /// An outbound user event: the caller of call `id` stopped waiting (it was cancelled). Its
    /// replies are still read, to keep the FIFO in step, and then dropped.
    struct AbandonCall: Sendable {
        var id: UInt64
    }

    private struct Waiting {
        var id: UInt64
        var method: String
        var more: Bool
        var timeout: TimeAmount?
        var promise: EventLoopPromise<[VarlinkReply]>
        var onReply: (@Sendable (VarlinkReply) -> Void)?
        var replies: [VarlinkReply] = []
        var timer: Scheduled<Void>?
        var abandoned = false
        /// Its bytes went out. A call failed before that never reached the daemon, so it may be
        /// sent again on another connection.
        var written = false
    }

    private var waiting = CircularBuffer<Waiting>()
    /// Set once the connection is unusable; every later call fails without being sent.
    private var isClosed = false
    /// Whether a call has been handed to this handler: an error reply before that is a refusal
    /// at accept, after it a reply nobody waits for.
    private var hasCalls = false
    /// Where a refusal at accept is kept for ``TokendConnection``.
    private let refusal: RefusalAtAccept
    private var context: ChannelHandlerContext?
    private var encoded: [UInt8] = []

    init(refusal: RefusalAtAccept = RefusalAtAccept()) {
        self.refusal = refusal
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        fail(with: TokendClientError(code: .daemonUnavailable, message: "the connection to tokend was closed"))
        self.context = nil
    }

    // MARK: Outbound

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        let outbound = unwrapOutboundIn(data)
        hasCalls = true
        if isClosed {
            var error = TokendClientError(
                code: .daemonUnavailable,
                message: "the connection to tokend was closed",
                method: outbound.call.method
            )
            error.wasNotSent = true
            outbound.promise.fail(error)
            promise?.fail(error)
            return
        }

        encoded.removeAll(keepingCapacity: true)
        outbound.call.encode(into: &encoded)
        var buffer = context.channel.allocator.buffer(capacity: encoded.count + 1)
        buffer.writeVarlinkMessage(encoded)

        if outbound.call.oneway {
            // No reply will come: the call is done once the bytes are out.
            let written = context.eventLoop.makePromise(of: Void.self)
            written.futureResult.whenComplete { result in
                switch result {
                case .success: outbound.promise.succeed([])
                case .failure(let error):
                    var clientError = Self.connectionError(error, method: outbound.call.method)
                    clientError.wasNotSent = true
                    outbound.promise.fail(clientError)
                }
            }
            written.futureResult.cascade(to: promise)
            context.write(wrapOutboundOut(buffer), promise: written)
            return
        }

        var entry = Waiting(
            id: outbound.id,
            method: outbound.call.method,
            more: outbound.call.more,
            timeout: outbound.timeout,
            promise: outbound.promise,
            onReply: outbound.onReply
        )
        let id = outbound.id
        if let timeout = outbound.timeout {
            entry.timer = context.eventLoop.assumeIsolated().scheduleTask(in: timeout) { [self] in
                self.timedOut(id: id)
            }
        }
        waiting.append(entry)
        let written = context.eventLoop.makePromise(of: Void.self)
        written.futureResult.assumeIsolated().whenComplete { [self] result in
            switch result {
            case .success:
                if let index = waiting.lastIndex(where: { $0.id == id }) { waiting[index].written = true }
            case .failure(let error):
                // Bytes that did not go out leave the stream in an unknown state.
                if let context = self.context { fatal(Self.connectionError(error, method: nil), context: context) }
            }
        }
        written.futureResult.cascade(to: promise)
        context.write(wrapOutboundOut(buffer), promise: written)
    }

    func triggerUserOutboundEvent(context: ChannelHandlerContext, event: Any, promise: EventLoopPromise<Void>?) {
        guard let abandon = event as? AbandonCall else {
            context.triggerUserOutboundEvent(event, promise: promise)
            return
        }
        if let index = waiting.firstIndex(where: { $0.id == abandon.id }), !waiting[index].abandoned {
            waiting[index].abandoned = true
            waiting[index].replies = []
            waiting[index].promise.fail(
                TokendClientError(
                    code: .cancelled,
                    message: "the call to \(waiting[index].method) was cancelled",
                    method: waiting[index].method
                )
            )
        }
        promise?.succeed()
    }

    // MARK: Inbound

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        let reply: VarlinkReply
        do {
            reply = try VarlinkReply.decode(frame.readableBytesView)
        } catch {
            // The decoding error names the problem and the offset, never the content.
            fatal(
                TokendClientError(
                    code: .protocolError,
                    message: "tokend sent an invalid reply: \(error)",
                    cause: error
                ),
                context: context
            )
            return
        }
        guard var head = waiting.first else {
            if !hasCalls, reply.error != nil {
                // Refused at accept: tokend closes the connection after this reply.
                refusal.keep(reply)
                isClosed = true
                context.close(promise: nil)
                return
            }
            fatal(TokendClientError(code: .protocolError, message: "tokend sent a reply to no call"), context: context)
            return
        }
        let isLast = !reply.continues || reply.error != nil
        if !isLast && !head.more {
            fatal(
                TokendClientError(
                    code: .protocolError,
                    message: "tokend sent several replies to \(head.method), which was called without 'more'",
                    method: head.method
                ),
                context: context
            )
            return
        }
        let deliver = head.abandoned ? nil : head.onReply
        if !head.abandoned, deliver == nil { head.replies.append(reply) }
        // The FIFO is brought up to date before `onReply` runs: it may close the channel, which
        // fails and removes every waiting call.
        if !isLast {
            waiting[waiting.startIndex] = head
            deliver?(reply)
            return
        }
        waiting.removeFirst()
        head.timer?.cancel()
        guard !head.abandoned else { return }
        if let deliver {
            deliver(reply)
            head.promise.succeed([])
        } else {
            head.promise.succeed(head.replies)
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        let clientError: TokendClientError
        if let frameError = error as? VarlinkFrameError {
            clientError = TokendClientError(
                code: .protocolError,
                message: "tokend sent a reply over the size limit (\(frameError))",
                cause: error
            )
        } else {
            clientError = Self.connectionError(error, method: nil)
        }
        fatal(clientError, context: context)
    }

    func channelInactive(context: ChannelHandlerContext) {
        fail(
            with: TokendClientError(
                code: .daemonUnavailable,
                message: "the connection to tokend was closed before it answered"
            )
        )
        context.fireChannelInactive()
    }

    // MARK: Failing

    private func timedOut(id: UInt64) {
        guard let late = waiting.first(where: { $0.id == id }) else { return }
        let limit = late.timeout.map { Self.format($0) } ?? "the timeout"
        let method = late.abandoned ? "a cancelled call" : late.method
        // The late reply would be taken for the next call's, so this connection is finished.
        // The other calls on it can only be answered in order with the late one, so they fail
        // as timed out too (not as a lost connection: the daemon is there but not answering).
        isClosed = true
        while let entry = waiting.popFirst() {
            entry.timer?.cancel()
            let message =
                entry.id == id
                ? "tokend did not answer \(method) within \(limit)"
                : "tokend did not answer \(method) within \(limit), "
                    + "so the connection was closed before it answered \(entry.method)"
            entry.promise.fail(TokendClientError(code: .timeout, message: message, method: entry.method))
        }
        context?.close(promise: nil)
    }

    /// Makes the connection unusable: fails every waiting call with `error` and closes.
    private func fatal(_ error: TokendClientError, context: ChannelHandlerContext) {
        fail(with: error)
        context.close(promise: nil)
    }

    private func fail(with error: TokendClientError) {
        isClosed = true
        while let entry = waiting.popFirst() {
            entry.timer?.cancel()
            var callError = error
            callError.method = entry.method
            callError.wasNotSent = !entry.written
            entry.promise.fail(callError)
        }
    }

    static func connectionError(_ error: any Error, method: String?) -> TokendClientError {
        if let clientError = error as? TokendClientError { return clientError }
        var result = TokendClientError(
            code: .daemonUnavailable,
            message: "the connection to tokend failed: \(error)",
            method: method,
            cause: error
        )
        if let channelError = error as? ChannelError,
            channelError == .ioOnClosedChannel || channelError == .alreadyClosed
        {
            result.message = "the connection to tokend was closed"
        }
        return result
    }

    static func format(_ amount: TimeAmount) -> String {
        let ms = amount.nanoseconds / 1_000_000
        if ms % 1000 == 0 { return "\(ms / 1000)s" }
        return "\(ms)ms"
    }
}

@available(*, unavailable)
extension VarlinkClientHandler: Sendable {}

import Logging
import NIOCore
import TokendCore
import TokendJSON
import TokendProtocol

/// Serves one client connection: decodes each framed call, routes it, and writes replies in
/// the order the calls came, even when an earlier call waits for a refresh and a later one
/// could be answered at once.
///
/// Back-pressure: reading stops while `maximumPendingCalls` replies are outstanding or while
/// the socket's send buffer is above its high-water mark (a client that never reads), so one
/// client cannot make the daemon buffer without bound; other connections are unaffected.
final class VarlinkConnectionHandler: ChannelDuplexHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private struct PendingReply {
        let id: UInt64
        var messages: [[UInt8]]?
        var closeAfter: Bool
        /// A write (add, remove, rotate): calls after it wait until it has committed.
        var isBarrier = false
    }

    /// A message that arrived while a write was pending, kept to be handled after it.
    private enum HeldMessage {
        case call(VarlinkCall)
        case invalid(String)
    }

    private let router: CallRouter
    private let caller: CallerIdentity
    private let maximumPendingCalls: Int
    private let logger: Logger

    /// Replies not yet written, oldest first. Empty in the common case, where a reply is
    /// written straight away.
    private var pending = CircularBuffer<PendingReply>(initialCapacity: 4)
    /// Calls received behind a pending write. A connection is a sequence: a call made after
    /// `AddCredential` sees the credential, while reads that merely wait for a refresh do not
    /// hold up the calls behind them.
    private var held = CircularBuffer<HeldMessage>()
    private var pendingBarriers = 0
    private var nextID: UInt64 = 0
    /// A `read()` from the pipeline that was held back by back-pressure.
    private var heldRead = false
    private var closing = false
    private var needsFlush = false
    /// The client shut down its sending side (e.g. `socat` at end of input): answer what was
    /// asked, then close.
    private var inputClosed = false

    init(router: CallRouter, caller: CallerIdentity, maximumPendingCalls: Int, logger: Logger) {
        self.router = router
        self.caller = caller
        self.maximumPendingCalls = maximumPendingCalls
        self.logger = logger
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !closing else { return }
        let frame = unwrapInboundIn(data)
        let message: HeldMessage
        do {
            message = .call(try VarlinkCall.decode(frame.readableBytesView))
        } catch {
            // The framing is intact (the NUL was found), so the stream is still in step: answer
            // with a typed error and keep serving this client.
            logger.debug("malformed message", metadata: ["uid": "\(caller.uid)", "pid": "\(caller.pid)", "problem": "\(error)"])
            message = .invalid(error.description)
        }
        if pendingBarriers > 0 {
            held.append(message)
        } else {
            handle(message, context: context)
        }
    }

    private func handle(_ message: HeldMessage, context: ChannelHandlerContext) {
        switch message {
        case .invalid(let reason):
            enqueue(.reply(ErrorReplies.invalidMessage(reason)), closeAfter: false, context: context)
        case .call(let call):
            let outcome = router.route(call, caller: caller, eventLoop: context.eventLoop)
            enqueue(outcome, closeAfter: false, isBarrier: router.isWrite(call), context: context)
        }
    }

    /// Handles held messages once no write is pending any more.
    private func releaseHeld(context: ChannelHandlerContext) {
        while pendingBarriers == 0, let next = held.popFirst() {
            handle(next, context: context)
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        flushIfNeeded(context: context)
        context.fireChannelReadComplete()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if let frameError = error as? VarlinkFrameError {
            // Past an oversized message the stream cannot be trusted: say why, then close.
            logger.notice("closing connection: \(frameError)", metadata: ["uid": "\(caller.uid)", "pid": "\(caller.pid)"])
            enqueue(.reply(ErrorReplies.invalidMessage(frameError.description)), closeAfter: true, context: context)
            flushIfNeeded(context: context)
            closing = true
            return
        }
        // I/O errors (e.g. ECONNRESET from a client that vanished) end the connection quietly.
        logger.debug("connection error: \(error)", metadata: ["uid": "\(caller.uid)", "pid": "\(caller.pid)"])
        context.close(promise: nil)
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let event = event as? ChannelEvent, event == .inputClosed {
            inputClosed = true
            closeIfFinished(context: context)
        }
        context.fireUserInboundEventTriggered(event)
    }

    private func closeIfFinished(context: ChannelHandlerContext) {
        if inputClosed, pending.isEmpty, held.isEmpty, !closing { close(context: context) }
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        resumeReadingIfPossible(context: context)
        context.fireChannelWritabilityChanged()
    }

    func read(context: ChannelHandlerContext) {
        if pending.count + held.count >= maximumPendingCalls || !context.channel.isWritable {
            heldRead = true
            return
        }
        context.read()
    }

    // MARK: Replies

    private func enqueue(_ outcome: CallOutcome, closeAfter: Bool, isBarrier: Bool = false, context: ChannelHandlerContext) {
        switch outcome {
        case .none:
            if closeAfter { close(context: context) }
        case .reply(let message):
            if pending.isEmpty {
                write(message, context: context)
                if closeAfter { close(context: context) }
            } else {
                appendReady([message], closeAfter: closeAfter)
            }
        case .replies(let messages):
            if pending.isEmpty {
                for message in messages { write(message, context: context) }
                if closeAfter { close(context: context) }
            } else {
                appendReady(messages, closeAfter: closeAfter)
            }
        case .deferred(let future):
            let id = nextID
            nextID &+= 1
            pending.append(PendingReply(id: id, messages: nil, closeAfter: closeAfter, isBarrier: isBarrier))
            if isBarrier { pendingBarriers += 1 }
            let handler = NIOLoopBound(self, eventLoop: context.eventLoop)
            let boundContext = NIOLoopBound(context, eventLoop: context.eventLoop)
            future.hop(to: context.eventLoop).whenComplete { result in
                let messages: [[UInt8]]
                switch result {
                case .success(let value): messages = value
                case .failure(let error):
                    // Deferred work is built not to fail; if it does, the caller still gets an answer.
                    messages = [ErrorReplies.internalError("\(error)")]
                }
                handler.value.complete(id: id, messages: messages, context: boundContext.value)
            }
        }
    }

    private func appendReady(_ messages: [[UInt8]], closeAfter: Bool) {
        pending.append(PendingReply(id: nextID, messages: messages, closeAfter: closeAfter))
        nextID &+= 1
    }

    private func complete(id: UInt64, messages: [[UInt8]], context: ChannelHandlerContext) {
        guard let index = pending.firstIndex(where: { $0.id == id }) else { return }
        pending[index].messages = messages
        if pending[index].isBarrier {
            pendingBarriers -= 1
            releaseHeld(context: context)
        }
        drain(context: context)
        flushIfNeeded(context: context)
        resumeReadingIfPossible(context: context)
        closeIfFinished(context: context)
    }

    /// Writes every reply at the head of the queue that is ready, stopping at the first that is not.
    private func drain(context: ChannelHandlerContext) {
        while let head = pending.first, let messages = head.messages {
            pending.removeFirst()
            for message in messages { write(message, context: context) }
            if head.closeAfter {
                close(context: context)
                return
            }
        }
    }

    private func write(_ message: [UInt8], context: ChannelHandlerContext) {
        guard context.channel.isActive else { return }
        var buffer = context.channel.allocator.buffer(capacity: message.count + 1)
        buffer.writeVarlinkMessage(message)
        context.write(wrapOutboundOut(buffer), promise: nil)
        needsFlush = true
    }

    private func flushIfNeeded(context: ChannelHandlerContext) {
        if needsFlush {
            needsFlush = false
            context.flush()
        }
    }

    private func close(context: ChannelHandlerContext) {
        closing = true
        flushIfNeeded(context: context)
        context.close(promise: nil)
    }

    private func resumeReadingIfPossible(context: ChannelHandlerContext) {
        if heldRead, pending.count + held.count < maximumPendingCalls, context.channel.isWritable {
            heldRead = false
            context.read()
        }
    }
}

@available(*, unavailable)
extension VarlinkConnectionHandler: Sendable {}

/// Encoded error replies used by the connection layer itself.
enum ErrorReplies {
    static func encode(_ error: VarlinkError) -> [UInt8] {
        var bytes: [UInt8] = []
        VarlinkReply(error).encode(into: &bytes)
        return bytes
    }

    /// The message could not be read as a Varlink call.
    static func invalidMessage(_ reason: String) -> [UInt8] {
        encode(.invalidMessage(reason))
    }

    static func internalError(_ reason: String) -> [UInt8] {
        encode(.storageFailed("internal error: \(reason)"))
    }
}

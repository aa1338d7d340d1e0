import Logging
import NIOCore
import TokendCore

/// Closes a connection whose client takes longer than `limit` to finish a message it has begun
/// (a "slowloris" client sending a byte now and then holds a connection slot for nothing).
///
/// Only time the daemon spends *waiting for the client* counts: the clock runs while a read is
/// requested and a message is incomplete, and stops while reading is paused by back-pressure
/// (pipelined calls waiting for replies, a client that does not read), so a well-behaved client
/// whose calls wait for a slow refresh is never cut off. An idle connection between messages
/// (e.g. a `Watch` client) has no timer at all. Sits in front of the frame decoder and sees the
/// raw bytes; a NUL ends a message.
final class PartialMessageTimeout: ChannelDuplexHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private let limit: TimeAmount
    private let caller: CallerIdentity
    private let logger: Logger

    /// Bytes of a message have arrived, but not yet its NUL.
    private var partial = false
    /// Time already spent waiting for the rest of the current partial message.
    private var waited: TimeAmount = .zero
    /// When the outstanding read was requested (`nil`: no read outstanding).
    private var readRequestedAt: NIODeadline?
    private var timer: Scheduled<Void>?

    init(limit: TimeAmount, caller: CallerIdentity, logger: Logger) {
        self.limit = limit
        self.caller = caller
        self.logger = logger
    }

    func read(context: ChannelHandlerContext) {
        if readRequestedAt == nil { readRequestedAt = .now() }
        if partial { arm(context: context) }
        context.read()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if let since = readRequestedAt {
            if partial { waited = waited + (.now() - since) }
            readRequestedAt = nil
        }
        timer?.cancel()
        timer = nil
        let buffer = unwrapInboundIn(data)
        partial = Self.leavesPartialMessage(buffer.readableBytesView, wasPartial: partial, waited: &waited)
        context.fireChannelRead(data)
    }

    func channelInactive(context: ChannelHandlerContext) {
        timer?.cancel()
        timer = nil
        context.fireChannelInactive()
    }

    /// Whether the stream is inside a message after `bytes`; resets `waited` when a message
    /// ended in them (the next one starts its own clock).
    static func leavesPartialMessage(_ bytes: ByteBufferView, wasPartial: Bool, waited: inout TimeAmount) -> Bool {
        guard let lastNUL = bytes.lastIndex(of: 0) else { return wasPartial || !bytes.isEmpty }
        waited = .zero
        return bytes.index(after: lastNUL) != bytes.endIndex
    }

    private func arm(context: ChannelHandlerContext) {
        guard timer == nil else { return }
        let remaining = limit - waited
        let handler = NIOLoopBound(self, eventLoop: context.eventLoop)
        let boundContext = NIOLoopBound(context, eventLoop: context.eventLoop)
        timer = context.eventLoop.scheduleTask(in: max(remaining, .zero)) {
            handler.value.expired(context: boundContext.value)
        }
    }

    private func expired(context: ChannelHandlerContext) {
        timer = nil
        guard partial, context.channel.isActive else { return }
        logger.notice(
            "closing connection: message not completed within message_timeout",
            metadata: ["uid": "\(caller.uid)", "pid": "\(caller.pid)", "limit": "\(limit)"]
        )
        context.close(promise: nil)
    }
}

@available(*, unavailable)
extension PartialMessageTimeout: Sendable {}

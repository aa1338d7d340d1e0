import NIOCore
import TokendCore
import TokendProtocol

/// Answers a connection refused at accept — by a per-uid limit (`QuotaExceeded`), or on the
/// administrators' socket for a caller who is not one (`PermissionDenied`) — with the error as
/// its only message, then the end of the stream.
///
/// The client's first call may already be on its way, so the connection is not closed at once
/// (a close with unread data would reset it, and the client would see "connection reset"
/// instead of the reason): the write side is shut down after the error, what the client sends
/// is discarded, and the connection closes when the client closes it or after `linger`.
final class ConnectionRefusal: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer

    private let error: VarlinkError
    private let linger: TimeAmount
    private var answered = false
    private var lingerTimer: Scheduled<Void>?

    init(_ error: VarlinkError, linger: TimeAmount = .milliseconds(250)) {
        self.error = error
        self.linger = linger
    }

    convenience init(_ refusal: QuotaRefusal, linger: TimeAmount = .milliseconds(250)) {
        self.init(.quotaExceeded(refusal.quota.rawValue, limit: refusal.limit), linger: linger)
    }

    func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { answer(context) }
    }

    func channelActive(context: ChannelHandlerContext) {
        answer(context)
        context.fireChannelActive()
    }

    private func answer(_ context: ChannelHandlerContext) {
        guard !answered else { return }
        answered = true
        let bytes = ErrorReplies.encode(error)
        var buffer = context.channel.allocator.buffer(capacity: bytes.count + 1)
        buffer.writeVarlinkMessage(bytes)
        let channel = context.channel
        context.writeAndFlush(NIOAny(buffer)).whenComplete { _ in
            channel.close(mode: .output, promise: nil)
        }
        lingerTimer = context.eventLoop.scheduleTask(in: linger) { channel.close(promise: nil) }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {}

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        // The client closed its side: nothing more will come.
        if event as? ChannelEvent == .inputClosed { context.close(promise: nil) }
    }

    func channelInactive(context: ChannelHandlerContext) {
        lingerTimer?.cancel()
        context.fireChannelInactive()
    }
}

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
/// the socket's send buffer is above its high-water mark (a client that never reads), and
/// calls already read are held undecided until the client reads again, so one client cannot
/// make the daemon buffer more than a high-water mark of replies; others are unaffected.
final class VarlinkConnectionHandler: ChannelDuplexHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    /// The replies of one call, in call order. A slot at the head of the queue writes its
    /// messages as they come; the next slot's turn starts when it is complete.
    private struct Slot {
        let id: UInt64
        var messages: [[UInt8]] = []
        var isComplete = false
        var closeAfter = false
        /// A write (add, remove, rotate): calls after it wait until it has committed.
        var isBarrier = false
        /// A `Watch` stream; holds the latest unwritten update only.
        var isStream = false
    }

    /// A message that arrived while a write was pending, kept to be handled after it.
    private enum HeldMessage {
        /// A call, and who wrote it.
        case call(VarlinkCall, CallSender)
        case invalid(String)
    }

    private let router: CallRouter
    /// The caller as the connection was made; each call's check is about who wrote it.
    private let caller: CallerIdentity
    /// Who wrote each call, when the connection traces it (a pidfd, Linux 6.5 and later).
    private let senders: CallSenders?
    /// Numbers the checks of program facts (``CallerIdentity/check``).
    private var checks: UInt64 = 0
    private let maximumPendingCalls: Int
    private let logger: Logger

    /// Replies not yet written, oldest first. Empty in the common case, where a reply is
    /// written straight away.
    private var slots = CircularBuffer<Slot>(initialCapacity: 4)
    /// Calls received behind a pending write. A connection is a sequence: a call made after
    /// `AddCredential` sees the credential, while reads that merely wait for a refresh do not
    /// hold up the calls behind them.
    private var held = CircularBuffer<HeldMessage>()
    private var pendingBarriers = 0
    private var nextID: UInt64 = 0
    /// `Watch` subscriptions to cancel when the connection goes away.
    private var subscriptions: [(user: String, id: UInt64)] = []
    /// Other streams' subscriptions (``CallOutcome/stream(subscribe:)``), ended with the connection.
    private var streamCancels: [@Sendable () -> Void] = []
    /// A `read()` from the pipeline that was held back by back-pressure.
    private var heldRead = false
    private var closing = false
    private var needsFlush = false
    /// The client shut down its sending side (e.g. `socat` at end of input): answer what was
    /// asked, then close.
    private var inputClosed = false
    /// A call has arrived on this connection.
    private var receivedACall = false
    /// A graceful stop reached this connection before its first call did: it keeps reading
    /// until that call arrives (for ``firstCallGrace`` at most), answers it, then closes.
    private var awaitingFirstCall = false
    /// How long a graceful stop waits for the first call of a connection it accepted before the
    /// stop: a client sends its call right after connecting, so this covers a call on its way,
    /// not a connection left idle (which would otherwise hold the stop until its deadline).
    static let firstCallGrace = TimeAmount.seconds(2)

    /// Counts calls by method and error (one atomic increment on the hot path).
    private let requestMetrics: RequestMetrics?

    init(
        router: CallRouter, caller: CallerIdentity, senders: CallSenders? = nil, maximumPendingCalls: Int, logger: Logger,
        requestMetrics: RequestMetrics? = nil
    ) {
        // The connection's own copy of the router carries its audit (``ConnectionAudit``).
        var router = router
        router.audit = router.auditTrail.connection(of: caller)
        self.router = router
        self.caller = caller
        self.senders = senders
        self.maximumPendingCalls = maximumPendingCalls
        self.logger = logger
        self.requestMetrics = requestMetrics
    }

    // MARK: Inbound

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !closing else { return }
        receivedACall = true
        awaitingFirstCall = false
        let frame = unwrapInboundIn(data)
        // Taken for every message, in order, so that each call's bytes are its own.
        let sender = senders?.sender(ofNext: frame.readableBytes + 1) ?? .unknown
        let message: HeldMessage
        do {
            message = .call(try VarlinkCall.decode(frame.readableBytesView), sender)
        } catch {
            // The framing is intact (the NUL was found), so the stream is still in step: answer
            // with a typed error and keep serving this client.
            logger.debug("malformed message", metadata: ["uid": "\(caller.uid)", "pid": "\(caller.pid)", "problem": "\(error)"])
            message = .invalid(error.description)
        }
        // Held behind a pending write, behind earlier held calls (order), or while the client is
        // not reading our replies: one read can carry hundreds of small calls whose replies
        // are far larger, so answering them all at once would buffer without bound.
        if pendingBarriers > 0 || !held.isEmpty || !context.channel.isWritable {
            held.append(message)
        } else {
            handle(message, context: context)
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        flushIfNeeded(context: context)
        // Still part of a first call (the listener reads no more by itself): read on.
        if awaitingFirstCall { context.read() }
        // Calls read after a graceful stop began were answered at once: close now.
        if inputClosed { closeIfFinished(context: context) }
        context.fireChannelReadComplete()
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let event = event as? ChannelEvent, event == .inputClosed {
            inputClosed = true
            awaitingFirstCall = false
            closeIfFinished(context: context)
        } else if event is ChannelShouldQuiesceEvent {
            // Graceful stop (the listener has stopped reading from this connection): answer the
            // calls already received, then close, as when the client shuts down its side. A
            // `Watch` stream has no last reply to wait for: it ends with the connection.
            // A connection accepted before the stop whose first call has not been read yet (a
            // `tokenctl token` that connected just before a restart) is read on until that call
            // arrives and is answered: closed unread, its caller could not tell whether the call
            // was seen. It closes after firstCallGrace if nothing comes.
            if !receivedACall, slots.isEmpty, held.isEmpty {
                awaitingFirstCall = true
                context.read()
                let handler = NIOLoopBound(self, eventLoop: context.eventLoop)
                let boundContext = NIOLoopBound(context, eventLoop: context.eventLoop)
                context.eventLoop.scheduleTask(in: Self.firstCallGrace) {
                    guard handler.value.awaitingFirstCall else { return }
                    handler.value.awaitingFirstCall = false
                    handler.value.closeIfFinished(context: boundContext.value)
                }
            }
            inputClosed = true
            for index in slots.indices where slots[index].isStream { slots[index].isComplete = true }
            drain(context: context)
            flushIfNeeded(context: context)
            closeIfFinished(context: context)
        }
        context.fireUserInboundEventTriggered(event)
    }

    func channelInactive(context: ChannelHandlerContext) {
        for subscription in subscriptions { router.hub.unsubscribe(subscription.user, id: subscription.id) }
        subscriptions.removeAll()
        for cancel in streamCancels { cancel() }
        streamCancels.removeAll()
        router.audit?.close()
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if let frameError = error as? VarlinkFrameError {
            // Past an oversized message the stream cannot be trusted: say why, then close.
            logger.notice("closing connection: \(frameError)", metadata: ["uid": "\(caller.uid)", "pid": "\(caller.pid)"])
            append(
                Slot(id: takeID(), messages: [ErrorReplies.invalidMessage(frameError.description)], isComplete: true, closeAfter: true),
                context: context)
            closing = true
            return
        }
        // I/O errors (e.g. ECONNRESET from a client that vanished) end the connection quietly.
        logger.debug("connection error: \(error)", metadata: ["uid": "\(caller.uid)", "pid": "\(caller.pid)"])
        context.close(promise: nil)
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable {
            drain(context: context)
            releaseHeld(context: context)
            flushIfNeeded(context: context)
            closeIfFinished(context: context)
        }
        resumeReadingIfPossible(context: context)
        context.fireChannelWritabilityChanged()
    }

    func read(context: ChannelHandlerContext) {
        if slots.count + held.count >= maximumPendingCalls || !context.channel.isWritable {
            heldRead = true
            return
        }
        context.read()
    }

    // MARK: Calls

    private func handle(_ message: HeldMessage, context: ChannelHandlerContext) {
        switch message {
        case .invalid(let reason):
            append(Slot(id: takeID(), messages: [ErrorReplies.invalidMessage(reason)], isComplete: true), context: context)
        case .call(let call, .unknown):
            // A call of unknown writer, which no program reader grants, is checked as the
            // connection: the hot path, without program readers.
            handle(call, as: caller, context: context)
        case .call(let call, let sender):
            // A check of its own, so that program facts are read once for it.
            var caller = self.caller
            caller.sender = sender
            caller.check = nextCheck()
            handle(call, as: caller, context: context)
        }
    }

    private func handle(_ call: VarlinkCall, as caller: CallerIdentity, context: ChannelHandlerContext) {
        // Parsed once: routing, the metrics and the order of writes all go by it.
        let method = ServedMethod(call.method)
        let outcome = router.route(call, method: method, caller: caller, eventLoop: context.eventLoop)
        requestMetrics?.record(method: method, outcome: outcome)
        enqueue(outcome, isBarrier: method?.descriptor.isWrite ?? false, caller: caller, context: context)
    }

    private func nextCheck() -> UInt64 {
        checks &+= 1
        return checks
    }

    private func takeID() -> UInt64 {
        defer { nextID &+= 1 }
        return nextID
    }

    private func enqueue(_ outcome: CallOutcome, isBarrier: Bool, caller: CallerIdentity, context: ChannelHandlerContext) {
        switch outcome {
        case .none:
            return
        case .reply(let message):
            if slots.isEmpty {
                // The hot path: nothing ahead of this reply, so no slot at all.
                write(message, context: context)
            } else {
                append(Slot(id: takeID(), messages: [message], isComplete: true), context: context)
            }
        case .replies(let messages):
            append(Slot(id: takeID(), messages: messages, isComplete: true), context: context)
        case .deferred(let future):
            let id = takeID()
            append(Slot(id: id, isBarrier: isBarrier), context: context)
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
        case .watch(let user, let initial):
            startWatch(user: user, initial: initial, caller: caller, context: context)
        case .stream(let subscribe):
            startStream(subscribe, context: context)
        }
    }

    private func append(_ slot: Slot, context: ChannelHandlerContext) {
        slots.append(slot)
        drain(context: context)
    }

    private func complete(id: UInt64, messages: [[UInt8]], context: ChannelHandlerContext) {
        guard let index = slots.firstIndex(where: { $0.id == id }) else { return }
        slots[index].messages += messages
        slots[index].isComplete = true
        if slots[index].isBarrier {
            slots[index].isBarrier = false
            pendingBarriers -= 1
            releaseHeld(context: context)
        }
        drain(context: context)
        flushIfNeeded(context: context)
        resumeReadingIfPossible(context: context)
        closeIfFinished(context: context)
    }

    /// Handles held messages once no write is pending any more and while the client reads.
    private func releaseHeld(context: ChannelHandlerContext) {
        while pendingBarriers == 0, context.channel.isWritable, let next = held.popFirst() {
            handle(next, context: context)
        }
    }

    // MARK: Watch

    private func startWatch(user: String, initial: ViewEntry, caller: CallerIdentity, context: ChannelHandlerContext) {
        let id = takeID()
        router.audit?.released(initial, to: caller, method: TokenProviderMethod.watch.rawValue)
        append(Slot(id: id, messages: [Self.streamed(initial.replyBytes)], isStream: true), context: context)
        let handler = NIOLoopBound(self, eventLoop: context.eventLoop)
        let boundContext = NIOLoopBound(context, eventLoop: context.eventLoop)
        let eventLoop = context.eventLoop
        let subscription = router.hub.subscribe(user) { event in
            eventLoop.execute { handler.value.watchEvent(event, slot: id, user: user, caller: caller, context: boundContext.value) }
        }
        subscriptions.append((user, subscription))
    }

    /// `caller` is the one the `Watch` call was checked as; each update checks it again, its
    /// program as it is then.
    private func watchEvent(_ event: WatchEvent, slot id: UInt64, user: String, caller: CallerIdentity, context: ChannelHandlerContext) {
        guard let index = slots.firstIndex(where: { $0.id == id }), !slots[index].isComplete else { return }
        let final: VarlinkError?
        switch event {
        case .updated(let entry):
            var recheck = caller
            if recheck.check != 0 { recheck.check = nextCheck() }
            if router.mayRead(recheck, entry) {
                // Counted when queued for the client: an update replaced before the client read it
                // counts too, so a watcher's count is an upper bound, never short.
                router.audit?.released(entry, to: recheck, method: TokenProviderMethod.watch.rawValue)
                // Only the newest token matters: updates not yet written (the client is not
                // reading, or calls before this one are still pending) are replaced, so a slow
                // watcher costs one message of memory, never a backlog.
                slots[index].messages = [Self.streamed(entry.replyBytes)]
                final = nil
            } else {
                router.audit?.refused(
                    user, to: recheck, method: TokenProviderMethod.watch.rawValue, reason: AuditRefusal.notAReader(nil))
                final = .permissionDenied(user)
            }
        case .removed:
            final = .unknownUser(user)
        case .reauthenticationRequired(let reason):
            router.audit?.refused(user, to: caller, method: TokenProviderMethod.watch.rawValue, reason: AuditRefusal.loginEnded)
            final = .reauthenticationRequired(user, reason: reason)
        }
        if let final {
            slots[index].messages.append(ErrorReplies.encode(final))
            slots[index].isComplete = true
            if let position = subscriptions.firstIndex(where: { $0.user == user }) {
                router.hub.unsubscribe(user, id: subscriptions[position].id)
                subscriptions.remove(at: position)
            }
        }
        drain(context: context)
        flushIfNeeded(context: context)
        closeIfFinished(context: context)
    }

    /// A stream's messages are rare (re-login warnings); a client that does not read keeps at
    /// most this many, the newest.
    static let maximumQueuedStreamMessages = 64

    private func startStream(
        _ subscribe: @Sendable (_ deliver: @escaping @Sendable ([UInt8]) -> Void) -> (first: [UInt8], cancel: @Sendable () -> Void),
        context: ChannelHandlerContext
    ) {
        let id = takeID()
        let handler = NIOLoopBound(self, eventLoop: context.eventLoop)
        let boundContext = NIOLoopBound(context, eventLoop: context.eventLoop)
        let eventLoop = context.eventLoop
        // Messages delivered from now on run after this call on the event loop, so after the
        // slot below exists.
        let (first, cancel) = subscribe { message in
            eventLoop.execute { handler.value.streamMessage(message, slot: id, context: boundContext.value) }
        }
        streamCancels.append(cancel)
        append(Slot(id: id, messages: [first], isStream: true), context: context)
        flushIfNeeded(context: context)
    }

    private func streamMessage(_ message: [UInt8], slot id: UInt64, context: ChannelHandlerContext) {
        guard let index = slots.firstIndex(where: { $0.id == id }), !slots[index].isComplete else { return }
        slots[index].messages.append(message)
        if slots[index].messages.count > Self.maximumQueuedStreamMessages { slots[index].messages.removeFirst() }
        drain(context: context)
        flushIfNeeded(context: context)
    }

    /// `{"parameters":…}` → `{"parameters":…,"continues":true}`.
    static func streamed(_ reply: [UInt8]) -> [UInt8] {
        var bytes = reply
        bytes.removeLast()
        bytes.append(contentsOf: #","continues":true}"#.utf8)
        return bytes
    }

    // MARK: Writing

    /// Writes what the head slots have, in order, stopping at the first slot not yet complete.
    /// Stream updates wait while the client is not reading (the socket is not writable).
    private func drain(context: ChannelHandlerContext) {
        while let head = slots.first {
            if head.isStream, !head.isComplete, !context.channel.isWritable { return }
            if !head.messages.isEmpty {
                for message in head.messages { write(message, context: context) }
                slots[slots.startIndex].messages.removeAll()
            }
            guard head.isComplete else { return }
            slots.removeFirst()
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

    private func closeIfFinished(context: ChannelHandlerContext) {
        if inputClosed, !awaitingFirstCall, slots.isEmpty, held.isEmpty, !closing { close(context: context) }
    }

    private func resumeReadingIfPossible(context: ChannelHandlerContext) {
        if heldRead, slots.count + held.count < maximumPendingCalls, context.channel.isWritable {
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

import Logging
import NIOCore
import NIOPosix
import Synchronization
import TokendCore
import TokendProtocol

/// Serves systemd's `LoadCredential=ID:/path/to/socket`: when a unit starts, its service manager
/// connects from a socket bound to `\0<random>/unit/<unit>/<ID>`, reads until the end, and puts
/// what it read in `$CREDENTIALS_DIRECTORY/ID`.
///
/// Each connection is one request, answered without reading anything: who asks is checked
/// (``LoadCredentialCaller``), the credential the ID names is looked up and decided on
/// (``LoadCredentialDecision``), refreshed first when its token would not stay valid for
/// `load_credential.min_valid` (within `load_credential.timeout`), and its token written before
/// the connection is closed. A refusal closes it with nothing written: systemd has no error
/// channel here. Every answer is one log record (``LoadCredentialRecord``).
struct LoadCredentialService: Sendable {
    let view: CredentialView
    let registry: CredentialRegistry
    let settings: RuntimeSettings
    let logger: Logger
    let now: @Sendable () -> Timestamp
    /// Where every answer is recorded besides the log (``LoadCredentialRecord/audit(_:delivered:)``).
    var auditTrail = AuditTrail.disabled
    /// Deliveries under way (each may wait for a refresh).
    let deliveries = DeliveriesUnderWay(limit: 256)

    /// The bootstrap of the socket: each accepted connection is served by ``serve(_:on:)``.
    func bootstrap(group: any EventLoopGroup, connections: OpenConnections) -> ServerBootstrap {
        ServerBootstrap(group: group)
            .serverChannelOption(.backlog, value: 256)
            .childChannelInitializer { channel in
                do {
                    // systemd shuts its side down once connected: that must not close ours
                    // before the token is written.
                    try channel.syncOptions?.setOption(.allowRemoteHalfClosure, value: true)
                } catch {
                    return channel.eventLoop.makeFailedFuture(error)
                }
                return LoadCredentialPeer.read(from: channel).flatMapThrowing { peer in
                    try channel.pipeline.syncOperations.addHandler(LoadCredentialHandler(service: self, peer: peer))
                    // After the handler, as OpenConnections asks: a stop under way reaches it.
                    connections.add(channel)
                }
            }
    }

    /// Answers one connection, on its event loop.
    func serve(_ peer: LoadCredentialPeer, on channel: any Channel) {
        var record = LoadCredentialRecord(uid: peer.uid, pid: peer.pid, request: nil, credential: nil, result: .refused(.unnamedPeer))
        let request: LoadCredentialName
        switch LoadCredentialCaller.check(peerPath: peer.path, uid: peer.uid, unit: peer.unit) {
        case .failure(let refusal):
            // The record still names what the peer asked for, when its name was systemd's form.
            record.request = try? LoadCredentialName.parse(peerPath: peer.path).get()
            return finish(record, refusal: refusal, on: channel)
        case .success(let checked):
            request = checked
            record.request = checked
        }
        let settings = self.settings.current.loadCredential
        let (name, format) = settings.target(of: request.credentialID)
        record.credential = name
        guard deliveries.begin() else { return finish(record, refusal: .busy(limit: deliveries.limit), on: channel) }
        channel.closeFuture.whenComplete { [deliveries] _ in deliveries.end() }

        let entry = view[name]
        switch LoadCredentialDecision.decide(
            unit: request.unit, name: name, credential: entry.map(Self.candidate), minimumValidity: settings.minimumValidity,
            now: now(), mayRefresh: true)
        {
        case .deliver:
            // A decision to deliver is made on an entry only.
            guard let entry else { return finish(record, refusal: .noSuchCredential(name), on: channel) }
            deliver(entry, format: format, record: record, on: channel)
        case .refuse(let refusal):
            finish(record, refusal: refusal, on: channel)
        case .refreshFirst(let validity):
            refreshThenDeliver(
                name, unit: request.unit, validity: validity, timeout: settings.timeout, format: format, record: record, peer: peer,
                on: channel)
        }
    }

    /// Waits at most `timeout` for a token valid for `validity` (the refresh engine's single
    /// flight: callers and systemd share one grant), then decides again without refreshing.
    private func refreshThenDeliver(
        _ name: String, unit: String, validity: Duration, timeout: Duration, format: LoadCredentialSettings.Format,
        record: LoadCredentialRecord, peer: LoadCredentialPeer, on channel: any Channel
    ) {
        let loop = channel.eventLoop
        let done = NIOLoopBoundBox(false, eventLoop: loop)
        let timer = loop.scheduleTask(in: .milliseconds(timeout.milliseconds)) {
            guard !done.value else { return }
            done.value = true
            finish(record, refusal: .timedOut(timeout), on: channel)
        }
        let caller = peer.caller
        Task { [registry] in
            let fresh: Result<ViewEntry, LoadCredentialRefusal>
            do throws(VarlinkError) {
                fresh = .success(
                    try await registry.freshEntry(for: name, reason: .tooShortLived(minimumValidity: validity), caller: caller))
            } catch {
                fresh = .failure(Self.refusal(from: error, name: name))
            }
            loop.execute {
                guard !done.value else { return }
                done.value = true
                timer.cancel()
                switch fresh {
                case .failure(let refusal):
                    finish(record, refusal: refusal, on: channel)
                case .success(let entry):
                    // Decided again on the entry as it is now: it may have been replaced, with other readers.
                    switch LoadCredentialDecision.decide(
                        unit: unit, name: name, credential: Self.candidate(entry), minimumValidity: validity, now: now(),
                        mayRefresh: false)
                    {
                    case .deliver: deliver(entry, format: format, record: record, on: channel)
                    case .refuse(let refusal): finish(record, refusal: refusal, on: channel)
                    case .refreshFirst: finish(record, refusal: .refreshFailed("internal error: a second refresh was asked"), on: channel)
                    }
                }
            }
        }
    }

    /// Writes the token, then closes.
    private func deliver(_ entry: ViewEntry, format: LoadCredentialSettings.Format, record: LoadCredentialRecord, on channel: any Channel) {
        guard let credentials = entry.credentials else { return finish(record, refusal: .storeUnreadable, on: channel) }
        conclude(record, .delivered(expiresAt: entry.deadline, format: format), delivered: entry)
        let buffer = channel.allocator.buffer(bytes: LoadCredentialPayload.bytes(credentials, format: format))
        channel.writeAndFlush(buffer).whenComplete { _ in channel.close(promise: nil) }
    }

    /// Logs the refusal and closes the connection with nothing written.
    private func finish(_ record: LoadCredentialRecord, refusal: LoadCredentialRefusal, on channel: any Channel) {
        conclude(record, .refused(refusal), delivered: nil)
        channel.close(promise: nil)
    }

    /// Logs the outcome and puts it on the audit trail.
    private func conclude(_ record: LoadCredentialRecord, _ result: LoadCredentialRecord.Result, delivered: ViewEntry?) {
        var record = record
        record.result = result
        record.log(logger)
        record.audit(auditTrail, delivered: delivered)
    }

    static func candidate(_ entry: ViewEntry) -> LoadCredentialCandidate {
        LoadCredentialCandidate(
            name: entry.userIdentifier, readers: entry.resolvedReaders, deadline: entry.deadline,
            needsLogin: entry.status.state == .reauthenticationRequired, isDPoPBound: entry.isDPoPBound)
    }

    /// A refresh's error as a refusal (its reason names no token).
    static func refusal(from error: VarlinkError, name: String) -> LoadCredentialRefusal {
        let reason: String? = if case .string(let text)? = error.parameters["reason"] { text } else { nil }
        switch TokendErrorName(rawValue: error.name) {
        case .unknownUser?: return .noSuchCredential(name)
        case .reauthenticationRequired?: return .reauthenticationRequired(name)
        default: return .refreshFailed(reason ?? error.name)
        }
    }
}

/// Counts deliveries under way, up to a limit.
final class DeliveriesUnderWay: Sendable {
    let limit: Int
    private let count = Mutex(0)

    init(limit: Int) { self.limit = limit }

    /// Takes a place, or returns `false` when all are taken.
    func begin() -> Bool {
        count.withLock { count in
            guard count < limit else { return false }
            count += 1
            return true
        }
    }

    func end() { count.withLock { $0 -= 1 } }
}

/// The pipeline of a `LoadCredential=` connection: serves it once active, reads and drops
/// whatever the peer sends (systemd sends nothing), and closes on an error.
final class LoadCredentialHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer

    private let service: LoadCredentialService
    private let peer: LoadCredentialPeer

    init(service: LoadCredentialService, peer: LoadCredentialPeer) {
        self.service = service
        self.peer = peer
    }

    func channelActive(context: ChannelHandlerContext) {
        service.serve(peer, on: context.channel)
        context.fireChannelActive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {}

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        // A graceful stop: the delivery under way finishes (within load_credential.timeout) and closes.
        if event is ChannelShouldQuiesceEvent { return }
        context.fireUserInboundEventTriggered(event)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }
}

@available(*, unavailable)
extension LoadCredentialHandler: Sendable {}

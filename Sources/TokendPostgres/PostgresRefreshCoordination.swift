import Logging
import PostgresNIO
import Synchronization
import TokendCore
import TokendStorage

/// Refresh leases and change propagation for nodes sharing a ``PostgresCredentialStore``.
///
/// - Leases: ``acquireLease(_:)`` takes the credential's lease in the database (holder, expiry,
///   fencing counter, one statement); while held, the store fences this node's writes of that
///   credential with the counter. A node that cannot reach the database gets `.unavailable` and
///   refreshes nothing; a lease it held lapses on the database's clock.
/// - Changes: ``run(handlers:)`` keeps a dedicated connection listening on `tokend_changes` and
///   hands every committed change and every lease another node takes to the registry, and
///   every `reconcileMilliseconds` compares
///   all generations in case a notification was missed (a dropped connection, a restart).
public final class PostgresRefreshCoordination: RefreshCoordination {
    public let store: PostgresCredentialStore
    let logger: Logger
    let productVersion: String
    let waiters = ChangeWaiters()
    let leaseTable = Mutex(LeaseTable())
    let nodeList = Mutex<[String]>([])

    public init(store: PostgresCredentialStore, productVersion: String = "unknown", logger: Logger) {
        self.store = store
        self.productVersion = productVersion
        self.logger = logger
        nodeList.withLock { $0 = [store.settings.nodeName] }
    }

    public var nodeName: String? { store.settings.nodeName }

    public func acquireLease(_ userIdentifier: String) async -> LeaseDecision {
        do {
            // Bounded: a lease released between our two statements is tried once more.
            for _ in 0..<3 {
                switch try await store.tryAcquireLease(userIdentifier) {
                case .granted(let lease):
                    noteLease(userIdentifier, holder: lease.holder, expiresAt: lease.expiresAt, fencing: lease.fencing)
                    return .granted(lease)
                case .heldElsewhere(let holder, let expiresAt, let fencing):
                    noteLease(userIdentifier, holder: holder, expiresAt: expiresAt, fencing: fencing)
                    return .heldElsewhere(holder: holder, expiresAt: expiresAt)
                case .raced:
                    continue
                }
            }
            return .unavailable(reason: "the refresh lease of '\(userIdentifier)' changes hands too often")
        } catch {
            return .unavailable(reason: "\(error)")
        }
    }

    public func releaseLease(_ lease: RefreshLease) async {
        noteLease(lease.userIdentifier, holder: nil, expiresAt: store.now(), fencing: lease.fencing)
        do {
            try await store.releaseLease(lease)
        } catch {
            // It lapses on its own.
            logger.warning("releasing a refresh lease failed; it will expire", metadata: ["user_identifier": "\(lease.userIdentifier)"])
        }
    }

    public func waitForChange(of userIdentifier: String, until deadline: Timestamp) async {
        await waiters.wait(for: userIdentifier, atMost: deadline - store.now())
    }

    public func health() -> StoreHealth { store.health }

    public func leaseHolders() -> [String: LeaseHolder] {
        let now = store.now()
        return leaseTable.withLock { $0.holders(now: now) }
    }

    public func lease(of userIdentifier: String) -> LeaseHolder? { leaseTable.withLock { $0.lease(of: userIdentifier) } }

    public var leaseDuration: Duration { .milliseconds(store.settings.leaseMilliseconds) }

    public func nodes() -> [String] { nodeList.withLock { $0 } }

    /// Calls `observer` whenever the store becomes unavailable or available again.
    public func onHealthChange(_ observer: @escaping @Sendable () -> Void) { store.monitor.onChange(observer) }

    func noteLease(_ user: String, holder: String?, expiresAt: Timestamp, fencing: Int64) {
        let now = store.now()
        leaseTable.withLock { $0.note(user, holder: holder, expiresAt: expiresAt, fencing: fencing, now: now) }
    }
}

/// What the registry does with news from the other nodes.
public struct ChangeHandlers: Sendable {
    /// Credentials changed in the store: reload them (a generation is `nil` for a credential
    /// that was removed). Changes come in batches of at most ``PostgresRefreshCoordination/changeBatchLimit``.
    public var credentialsChanged: @Sendable (_ changes: [String: Int64?]) async -> Void
    /// The store's generations, for a full comparison with the node's view.
    public var reconcile: @Sendable (_ generations: [String: Int64]) async -> Void
    /// Other nodes took (or renewed) these credentials' leases, each with its holder and end as
    /// heard, in batches like the changes. The lease table
    /// (``PostgresRefreshCoordination/lease(of:)``) may have newer news by then.
    public var leasesTaken: @Sendable (_ leases: [String: LeaseHolder]) async -> Void

    public init(
        credentialsChanged: @escaping @Sendable ([String: Int64?]) async -> Void,
        reconcile: @escaping @Sendable ([String: Int64]) async -> Void,
        leasesTaken: @escaping @Sendable ([String: LeaseHolder]) async -> Void = { _ in }
    ) {
        self.credentialsChanged = credentialsChanged
        self.reconcile = reconcile
        self.leasesTaken = leasesTaken
    }

    /// Handlers that take the changes of a batch one by one.
    public init(
        credentialChanged: @escaping @Sendable (String, Int64?) async -> Void,
        reconcile: @escaping @Sendable ([String: Int64]) async -> Void
    ) {
        self.init(
            credentialsChanged: { changes in
                for (user, generation) in changes { await credentialChanged(user, generation) }
            }, reconcile: reconcile)
    }
}

extension PostgresRefreshCoordination {
    static let channel = "tokend_changes"

    /// Listens and reconciles until cancelled.
    public func run(handlers: ChangeHandlers) async {
        await withTaskGroup(of: Void.self) { tasks in
            tasks.addTask { await self.listen(handlers) }
            tasks.addTask { await self.reconcileLoop(handlers) }
            await tasks.waitForAll()
        }
    }

    /// The most credential changes handed to the registry at once.
    public static let changeBatchLimit = 1_000

    /// The least time between two batches of lease news (``ChangeHandlers/leasesTaken``).
    static let leaseNewsPace = Duration.milliseconds(100)

    /// One dedicated connection with `LISTEN tokend_changes`, re-opened with backoff whenever it
    /// fails. Every (re)connection is followed by a reconciliation, since notifications sent
    /// while nobody listened are lost. Lease news is noted as it comes; credential changes and
    /// the leases other nodes take are gathered (``ChangeBatch``, ``LeaseNews``) and handed over
    /// a batch at a time while the next ones arrive.
    private func listen(_ handlers: ChangeHandlers) async {
        var attempt = 0
        while !Task.isCancelled {
            do {
                try await store.client.withConnection { connection in
                    try await connection.listen(on: Self.channel) { notifications in
                        attempt = 0
                        store.monitor.succeeded()
                        logger.debug("listening for changes from other nodes")
                        await reconcileOnce(handlers)
                        let batch = ChangeBatch()
                        let leases = LeaseNews()
                        try await withThrowingTaskGroup(of: Void.self) { tasks in
                            tasks.addTask {
                                while let changes = await batch.next(limit: Self.changeBatchLimit) {
                                    await self.apply(changes, handlers)
                                    batch.applied(changes)
                                }
                            }
                            tasks.addTask {
                                while let taken = await leases.next(limit: Self.changeBatchLimit) {
                                    await handlers.leasesTaken(taken)
                                    leases.applied(taken)
                                    // What is done with them happens when a lease ends: news
                                    // handed over a moment later costs nothing, and a wave's
                                    // thousands a second come in a few batches instead.
                                    try? await Task.sleep(for: Self.leaseNewsPace)
                                }
                            }
                            do {
                                for try await notification in notifications {
                                    self.receive(notification.payload, into: batch, leases: leases)
                                }
                                batch.finish()
                                leases.finish()
                            } catch {
                                batch.finish()
                                leases.finish()
                                throw error
                            }
                            try await tasks.waitForAll()
                        }
                    }
                }
            } catch {
                if Task.isCancelled { return }
                let problem = PostgresCredentialStore.describe(error)
                if !problem.serverAnswered { store.monitor.failed(problem.text) }
                logger.warning("change notifications interrupted; reconnecting", metadata: ["problem": "\(problem.text)"])
            }
            attempt += 1
            let delay = Duration.milliseconds(min(5_000, 250 << min(attempt, 5)))
            try? await Task.sleep(for: delay)
        }
    }

    /// One notification: a lease's news now (and into `leases` when another node took it), a
    /// credential's change into `batch`.
    func receive(_ payload: String, into batch: ChangeBatch, leases: LeaseNews) {
        guard let change = ChangeNotification.parse(payload) else {
            logger.debug("ignored an unrecognised change notification")
            return
        }
        switch change {
        case .credentialUpdated(let user, let generation):
            batch.add(user, generation: generation)
        case .credentialRemoved(let user, _):
            batch.add(user, generation: nil)
        case .lease(let user, let holder, let fencing, let expiresAt):
            noteLease(user, holder: holder, expiresAt: expiresAt, fencing: fencing)
            if let holder, holder != store.settings.nodeName { leases.add(user, LeaseHolder(holder: holder, expiresAt: expiresAt)) }
            // A lease released after a result still waiting in the batch: its waiters are woken
            // once the result is applied, not before (they would find the old token).
            if !batch.isPending(user) { waiters.signal(user) }
        }
    }

    /// Hands a batch of credential changes to the registry, then wakes whoever waits for them
    /// (after the registry applied them, so a waiting grant sees the new state).
    func apply(_ changes: [String: Int64?], _ handlers: ChangeHandlers) async {
        await handlers.credentialsChanged(changes)
        for user in changes.keys { waiters.signal(user) }
    }

    private func reconcileLoop(_ handlers: ChangeHandlers) async {
        let interval = Duration.milliseconds(store.settings.reconcileMilliseconds)
        while !Task.isCancelled {
            try? await Task.sleep(for: interval)
            if Task.isCancelled { return }
            await reconcileOnce(handlers)
        }
    }

    /// Heartbeat, node list, lease table and generations; failures only mark the store unavailable.
    func reconcileOnce(_ handlers: ChangeHandlers) async {
        do {
            try await store.heartbeat(version: productVersion)
            let window = max(3 * store.settings.reconcileMilliseconds, 10_000)
            let nodes = try await store.recentNodes(withinMilliseconds: window)
            nodeList.withLock { $0 = nodes }
            let leases = try await store.liveLeases()
            let now = store.now()
            leaseTable.withLock { $0.merge(live: leases, now: now) }
            let generations = try await store.generations()
            await handlers.reconcile(generations)
        } catch {
            logger.warning("reconciliation with the shared store failed", metadata: ["problem": "\(error)"])
        }
    }
}

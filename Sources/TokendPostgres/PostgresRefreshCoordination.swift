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
///   hands every committed change to the registry, and every `reconcileMilliseconds` compares
///   all generations in case a notification was missed (a dropped connection, a restart).
public final class PostgresRefreshCoordination: RefreshCoordination {
    public let store: PostgresCredentialStore
    let logger: Logger
    let productVersion: String
    let waiters = ChangeWaiters()
    let leaseTable = Mutex<[String: LeaseHolder]>([:])
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
                    noteLease(userIdentifier, LeaseHolder(holder: lease.holder, expiresAt: lease.expiresAt))
                    return .granted(lease)
                case .heldElsewhere(let holder, let expiresAt):
                    noteLease(userIdentifier, LeaseHolder(holder: holder, expiresAt: expiresAt))
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
        noteLease(lease.userIdentifier, nil)
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
        return leaseTable.withLock { $0 }.filter { $0.value.expiresAt > now }
    }

    public func nodes() -> [String] { nodeList.withLock { $0 } }

    /// Calls `observer` whenever the store becomes unavailable or available again.
    public func onHealthChange(_ observer: @escaping @Sendable () -> Void) { store.monitor.onChange(observer) }

    func noteLease(_ user: String, _ holder: LeaseHolder?) {
        leaseTable.withLock { $0[user] = holder }
    }
}

/// What the registry does with news from the other nodes.
public struct ChangeHandlers: Sendable {
    /// A credential changed in the store: reload it (`generation` is `nil` when it was removed).
    public var credentialChanged: @Sendable (_ userIdentifier: String, _ generation: Int64?) async -> Void
    /// The store's generations, for a full comparison with the node's view.
    public var reconcile: @Sendable (_ generations: [String: Int64]) async -> Void

    public init(
        credentialChanged: @escaping @Sendable (String, Int64?) async -> Void,
        reconcile: @escaping @Sendable ([String: Int64]) async -> Void
    ) {
        self.credentialChanged = credentialChanged
        self.reconcile = reconcile
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

    /// One dedicated connection with `LISTEN tokend_changes`, re-opened with backoff whenever it
    /// fails. Every (re)connection is followed by a reconciliation, since notifications sent
    /// while nobody listened are lost.
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
                        for try await notification in notifications {
                            await handle(notification.payload, handlers)
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

    func handle(_ payload: String, _ handlers: ChangeHandlers) async {
        guard let change = ChangeNotification.parse(payload) else {
            logger.debug("ignored an unrecognised change notification")
            return
        }
        switch change {
        case .credentialUpdated(let user, let generation):
            await handlers.credentialChanged(user, generation)
        case .credentialRemoved(let user, _):
            await handlers.credentialChanged(user, nil)
        case .lease(let user, let holder, _, let expiresAt):
            noteLease(user, holder.map { LeaseHolder(holder: $0, expiresAt: expiresAt) })
        }
        // After the registry applied it, so a waiting grant sees the new state.
        waiters.signal(change.userIdentifier)
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
            leaseTable.withLock { $0 = leases }
            let generations = try await store.generations()
            await handlers.reconcile(generations)
        } catch {
            logger.warning("reconciliation with the shared store failed", metadata: ["problem": "\(error)"])
        }
    }
}

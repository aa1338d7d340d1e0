import Dispatch
import Logging
import NIOCore
import Synchronization
import TokendConfig
import TokendCore
import TokendJSON
import TokendOAuth
import TokendProtocol
import TokendStorage

/// The one writer of credentials, and the isolation domain of the refresh engine.
///
/// Every add, removal, refresh result and key rotation goes through this actor, is made durable
/// in the store first, and only then becomes visible in the view. Writes of one credential are
/// serialised by `locks`, so a removal can never be undone by a refresh finishing late; grants
/// themselves (HTTP) run with no lock held, and the actor is free while they wait.
///
/// The jobs are split over collaborators, each with its own state and file:
/// - enrolment: ``Enrolments`` (the rules are ``EnrolmentPolicy`` in TokendCore), used by
///   `AddCredential` and logins alike (`CredentialRegistry+Enrolment.swift`);
/// - the refresh executor: single flight, grant slots, rate limits, markers and commits
///   (`CredentialRegistry+Refresh.swift`, its books in ``GrantBook``);
/// - scheduling: ``RefreshScheduler`` and ``RefreshPolicy/events(status:renewable:times:jitter:now:)``
///   in TokendCore, the loop in `CredentialRegistry+Scheduler.swift`;
/// - coordination with other nodes of a shared store: a ``RefreshGate``
///   (`SharedStoreGate.swift`), which the executor passes through without knowing which;
/// - provider-specific renewal (OAuth, exec, HAT) behind ``ProviderRefresher``.
///
/// They share this actor on purpose: a grant's marker, its commit and the next plan must be
/// atomic with respect to the view, and separate actors would add a hop and a reentrancy
/// window between each.
actor CredentialRegistry {
    let store: any CredentialStore
    let view: CredentialView
    let settings: RuntimeSettings
    let keys: KeyManagement
    let logger: Logger
    let now: @Sendable () -> Timestamp
    let httpPool: HTTPClientPool

    var refreshers: Refreshers
    var limits: RefreshLimits
    /// Token files of the configured users, kept in step with the view.
    let tokenFiles: TokenFileSinks
    var locks = UserLocks()
    /// Serialises every grant that spends a credential's refresh token — its own refreshes and
    /// narrowed grants — for the whole grant, request included (``locks`` is free meanwhile).
    var refreshTokenLocks = UserLocks()
    var slots: GrantSlots
    /// The refresh leases this node may hold at once when it shares the store: as many as it
    /// has grant slots (``SharedStoreGate``).
    var leasePermits: GrantSlots
    var grants = GrantBook()
    var enrolments: Enrolments
    var scheduler = RefreshScheduler()
    /// When to look at each credential's re-login warnings next (`CredentialRegistry+Relogin.swift`).
    var reloginChecks = RefreshSchedule()
    var wakeup = SchedulerWakeup()
    var notices: ProviderNotices
    /// Whether this node may refresh a credential now (``RefreshGate``); a single host may
    /// always.
    var gate: any RefreshGate = SingleHostGate()
    /// The `relogin_command` hooks, at most `limits.maxReloginCommands` at once.
    let reloginCommands: ReloginCommands

    init(
        store: any CredentialStore, view: CredentialView, settings: RuntimeSettings, keys: KeyManagement,
        limits: RefreshLimits, httpPool: HTTPClientPool, logger: Logger, now: @escaping @Sendable () -> Timestamp
    ) {
        self.store = store
        self.view = view
        self.settings = settings
        self.keys = keys
        self.limits = limits
        self.httpPool = httpPool
        self.logger = logger
        self.now = now
        self.slots = GrantSlots(limit: limits.maxGrantsInFlight)
        self.leasePermits = GrantSlots(limit: limits.maxGrantsInFlight)
        self.refreshers = Refreshers(providers: settings.current.providers, pool: httpPool)
        self.tokenFiles = TokenFileSinks(hub: view.hub, logger: logger)
        self.enrolments = Enrolments(logger: logger)
        self.notices = ProviderNotices(logger: logger)
        self.reloginCommands = ReloginCommands(limit: limits.maxReloginCommands, logger: logger)
    }

    /// Fills the view from the store and plans every refresh (start-up). Credentials whose grant
    /// was interrupted by a crash are refreshed first, at once.
    ///
    /// Reads the store's index (``CredentialStore/loadIndex()``): metadata only, access tokens
    /// opened when first asked for, refresh tokens read at grant time. Reader lists are
    /// resolved once per distinct list.
    func loadAll() async throws -> Int {
        let credentials = try await store.loadIndex()
        let providers = settings.current.providers
        let current = now()
        // Pure per-credential work (plan, view entry) in one chunk per core.
        let chunkCount = credentials.count < 20_000 ? 1 : max(1, min(8, System.coreCount))
        let chunkSize = (credentials.count + chunkCount - 1) / max(1, chunkCount)
        // On Dispatch's pool, not in a task group: tasks run on the event loops (see
        // ConcurrencyExecutor), where child tasks would stay on one loop and run one by one.
        let chunks = await withCheckedContinuation { (continuation: CheckedContinuation<[StartUpChunk], Never>) in
            DispatchQueue.global().async {
                let results = Mutex([StartUpChunk?](repeating: nil, count: chunkCount))
                DispatchQueue.concurrentPerform(iterations: chunkCount) { index in
                    let range = min(index * chunkSize, credentials.count)..<min((index + 1) * chunkSize, credentials.count)
                    let chunk = Self.startUpChunk(credentials[range], providers: providers, now: current)
                    results.withLock { $0[index] = chunk }
                }
                continuation.resume(returning: results.withLock { $0.compactMap { $0 } })
            }
        }
        var entries: [ViewEntry] = []
        var due: [(userIdentifier: String, due: Timestamp)] = []
        var warn: [(userIdentifier: String, due: Timestamp)] = []
        entries.reserveCapacity(credentials.count)
        due.reserveCapacity(credentials.count)
        var recovering = 0
        for chunk in chunks {
            entries += chunk.entries
            due += chunk.due
            warn += chunk.warn
            recovering += chunk.recovering
            for (name, lifetime) in chunk.shortLived.sorted(by: { $0.key < $1.key }) {
                if let provider = providers[name] { notices.shortLivedTokens(provider: provider, lifetime: lifetime) }
            }
            for provider in chunk.unknownProviders.sorted() {
                logger.warning("credentials refer to a provider that is not configured", metadata: ["provider": "\(provider)"])
            }
        }
        scheduler.load(due: due, warnings: warn)
        view.replaceAll(with: entries)
        scheduleReloginChecks(entries.compactMap { $0.relogin == nil ? nil : $0.userIdentifier })
        if recovering > 0 {
            logger.notice("refreshing credentials whose grant was interrupted", metadata: ["count": "\(recovering)"])
        }
        tokenFiles.apply(settings.current.tokenFiles) { [view] in view[$0] }
        return credentials.count
    }

    /// What start-up computes for a run of credentials.
    struct StartUpChunk: Sendable {
        var entries: [ViewEntry] = []
        var due: [(userIdentifier: String, due: Timestamp)] = []
        var warn: [(userIdentifier: String, due: Timestamp)] = []
        var recovering = 0
        var unknownProviders: Set<String> = []
        /// Providers whose tokens live no longer than their margin, with a lifetime seen.
        var shortLived: [String: Duration] = [:]
    }

    /// Plans each credential and builds its view entry; pure, so chunks run in parallel.
    /// Credentials share a few providers and reader lists: each is looked up once.
    nonisolated static func startUpChunk(
        _ credentials: ArraySlice<IndexedCredential>, providers: [String: ProviderConfiguration], now current: Timestamp
    ) -> StartUpChunk {
        var chunk = StartUpChunk()
        chunk.entries.reserveCapacity(credentials.count)
        chunk.due.reserveCapacity(credentials.count)
        var lastProvider: (name: String, configuration: ProviderConfiguration?, policy: RefreshPolicy)?
        var resolved: [[Reader]: ResolvedReaders] = [:]
        for indexed in credentials {
            let credential = indexed.metadata
            if lastProvider?.name != credential.provider {
                let configuration = providers[credential.provider]
                lastProvider = (credential.provider, configuration, configuration?.refreshPolicy ?? RefreshPolicy())
                if configuration == nil { chunk.unknownProviders.insert(credential.provider) }
            }
            let provider = lastProvider!
            var nextRefreshAt: Timestamp?
            if credential.status.grantStartedAt != nil || credential.status.state == .refreshing {
                // The grant may have reached the provider; retry at once with the refresh token
                // the store still holds, inside the provider's reuse grace if it has one.
                nextRefreshAt = Timestamp(millisecondsSince1970: 0)
                chunk.recovering += 1
            } else if let configuration = provider.configuration {
                let events = plannedEvents(
                    status: credential.status, hasRefreshToken: indexed.hasRefreshToken, times: CredentialTimes(of: credential),
                    provider: configuration, now: current
                )
                nextRefreshAt = events.due
                if let plan = events.plan, plan.shorterThanMargin { chunk.shortLived[configuration.name] = plan.lifetime }
                if let warnAt = events.warnAt { chunk.warn.append((credential.userIdentifier, warnAt)) }
            }
            if let nextRefreshAt { chunk.due.append((credential.userIdentifier, nextRefreshAt)) }
            let readers: ResolvedReaders
            if let known = resolved[credential.readers] {
                readers = known
            } else {
                readers = SystemIdentity.resolve(credential.readers)
                if resolved.count < 10_000 { resolved[credential.readers] = readers }
            }
            chunk.entries.append(
                ViewEntry(indexed: indexed, policy: provider.policy, resolvedReaders: readers, nextRefreshAt: nextRefreshAt))
        }
        return chunk
    }

    /// Applies a new configuration: providers, policies, limits; rebuilds the view and the plan.
    func reconfigure(limits newLimits: RefreshLimits) {
        limits = newLimits
        slots.limit = newLimits.maxGrantsInFlight
        leasePermits.limit = newLimits.maxGrantsInFlight
        reloginCommands.setLimit(newLimits.maxReloginCommands)
        refreshers = Refreshers(providers: settings.current.providers, pool: httpPool)
        grants.resetRateLimits()
        // Narrowed tokens in memory were judged by the old settings (narrowed_tokens, policies):
        // the next requests read them from the store under the new ones.
        view.narrowedTokens.removeAll()
        let providers = settings.current.providers
        for old in view.snapshot() {
            plan(old, providers: providers)
            view.store(rebuiltEntry(old, providers: providers, nextRefreshAt: .some(scheduler.dueTime(of: old.userIdentifier))))
        }
        tokenFiles.apply(settings.current.tokenFiles) { [view] in view[$0] }
        wake()
    }

    // MARK: Per-user locks

    func lock(_ user: String) async {
        if locks.tryAcquire(user) { return }
        await withCheckedContinuation { continuation in locks.enqueue(user, continuation) }
    }

    func unlock(_ user: String) { locks.release(user) }

    /// Waits until no other grant spends `user`'s refresh token.
    func lockRefreshToken(_ user: String) async {
        if refreshTokenLocks.tryAcquire(user) { return }
        await withCheckedContinuation { continuation in refreshTokenLocks.enqueue(user, continuation) }
    }

    func unlockRefreshToken(_ user: String) { refreshTokenLocks.release(user) }

    // MARK: View entries

    func policy(for provider: String, providers: [String: ProviderConfiguration]) -> RefreshPolicy {
        providers[provider]?.refreshPolicy ?? RefreshPolicy()
    }

    func entry(for credential: Credential, providers: [String: ProviderConfiguration]) -> ViewEntry {
        ViewEntry(
            credential: credential, policy: policy(for: credential.provider, providers: providers),
            resolvedReaders: SystemIdentity.resolve(credential.readers), nextRefreshAt: scheduler.dueTime(of: credential.userIdentifier)
        )
    }

    func rebuiltEntry(
        _ old: ViewEntry, providers: [String: ProviderConfiguration], status: RefreshStatus? = nil, nextRefreshAt: Timestamp?? = nil
    ) -> ViewEntry {
        ViewEntry(
            rebuilding: old, policy: policy(for: old.provider, providers: providers), resolvedReaders: SystemIdentity.resolve(old.readers),
            status: status ?? old.status, nextRefreshAt: nextRefreshAt ?? old.nextRefreshAt
        )
    }
}

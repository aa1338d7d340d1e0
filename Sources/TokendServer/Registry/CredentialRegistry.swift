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

/// The one writer of credentials and the refresh engine.
///
/// Every add, removal, refresh result and key rotation goes through this actor, is made durable
/// in the store first, and only then becomes visible in the view. Writes of one credential are
/// serialised by `locks`, so a removal can never be undone by a refresh finishing late; grants
/// themselves (HTTP) run with no lock held, and the actor is free while they wait.
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
    var slots: GrantSlots
    /// Grants in flight by user: every caller that needs the same credential refreshed awaits
    /// the same task (single flight).
    var inFlight: [String: Task<GrantResult, Never>] = [:]
    /// Set when the daemon stops: no new proactive grant starts (see ``stopStartingProactiveGrants()``).
    var stoppingProactiveGrants = false
    var schedule = RefreshSchedule()
    var warnings = RefreshSchedule()
    var failures: [String: Int] = [:]
    /// Adds by non-administrators between their quota check and their store write, per uid, so
    /// that concurrent adds cannot pass the credential quota together.
    var pendingEnrolments: [UInt32: Int] = [:]
    /// One journal line a minute per uid whose enrolments the quota refuses.
    var quotaReports = RefusalReports()
    var lastForced: [String: Timestamp] = [:]
    /// Providers whose short-lived tokens the journal has mentioned (once each).
    var shortLivedProviders: Set<String> = []
    /// Providers whose tokens' unknown lifetime the journal has mentioned (once each).
    var assumedLifetimeProviders: Set<String> = []
    var buckets: [String: TokenBucket] = [:]
    var sleeper: CheckedContinuation<Void, Never>?
    var sleepTarget: Timestamp?
    var sleepTimer: Task<Void, Never>?
    /// Counts for status and tests.
    var grantsStarted = 0
    /// Who may refresh what when several nodes share the store (`CredentialRegistry+Shared.swift`);
    /// a single host grants itself every lease.
    var coordination: any RefreshCoordination = LocalRefreshCoordination()

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
        self.refreshers = Refreshers(providers: settings.current.providers, pool: httpPool)
        self.tokenFiles = TokenFileSinks(hub: view.hub, logger: logger)
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
        entries.reserveCapacity(credentials.count)
        due.reserveCapacity(credentials.count)
        var recovering = 0
        for chunk in chunks {
            entries += chunk.entries
            due += chunk.due
            warnings.schedule(contentsOf: chunk.warn)
            recovering += chunk.recovering
            for (name, lifetime) in chunk.shortLived.sorted(by: { $0.key < $1.key }) {
                if let provider = providers[name] { noteShortLivedTokens(provider: provider, lifetime: lifetime) }
            }
            for provider in chunk.unknownProviders.sorted() {
                logger.warning("credentials refer to a provider that is not configured", metadata: ["provider": "\(provider)"])
            }
        }
        schedule.schedule(contentsOf: due)
        view.replaceAll(with: entries)
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
                    status: credential.status, hasRefreshToken: indexed.hasRefreshToken,
                    times: (credential.issuedAt, credential.expiresAt, credential.sessionStartedAt), provider: configuration, now: current
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
        refreshers = Refreshers(providers: settings.current.providers, pool: httpPool)
        buckets.removeAll()
        let providers = settings.current.providers
        for old in view.snapshot() {
            plan(old, providers: providers)
            view.store(rebuiltEntry(old, providers: providers, nextRefreshAt: .some(schedule.dueTime(of: old.userIdentifier))))
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

    // MARK: Add and remove

    /// Stores a credential. `answeredByProvider`: the tokens come straight from the provider's
    /// token endpoint (a login), so an answer without a usable lifetime gets `assumed_lifetime`,
    /// as a refresh's would; a caller's `AddCredential` must say when its token expires.
    func add(_ request: AddCredentialRequest, caller: CallerIdentity, answeredByProvider: Bool = false) async throws(VarlinkError) {
        guard Identifier.isValid(request.userIdentifier) else { throw .invalidParameter("userIdentifier") }
        guard settings.current.providers[request.provider] != nil else { throw .unknownProvider(request.provider) }
        let readers = try EnrolmentRules.readers(requested: request.readers, caller: caller)
        let policy = settings.current.accessPolicy
        guard policy.mayManage(caller, readers: readers) else {
            logDenied(caller, action: "add", user: request.userIdentifier)
            throw .permissionDenied(request.userIdentifier)
        }

        // A HAT PDA token is verified (signature, alg, iss, application, exp) before anything is stored.
        let isHAT = try await verifyHATEnrolment(request)
        var object = JSONObject()
        object["access_token"] = .string(request.accessToken)
        object.setIfPresent("refresh_token", request.refreshToken.map(JSONValue.string))
        object.setIfPresent("token_type", request.tokenType.map(JSONValue.string))
        object.setIfPresent("expires_in", request.expiresIn.map(JSONValue.int))
        object.setIfPresent("scope", request.scope.map(JSONValue.string))
        let received = now()
        let response: TokenResponse
        let lifetime: TokenLifetime
        let provider = settings.current.providers[request.provider]!
        do {
            // The same validation as a token endpoint's answer.
            response = try TokenResponse.parse(object)
            lifetime =
                answeredByProvider
                ? response.lifetime(receivedAt: received, assumed: provider.refreshPolicy.assumedLifetime)
                : try response.statedLifetime(receivedAt: received)
        } catch {
            throw .invalidCredential(error.description)
        }
        if let reason = lifetime.assumedBecause { noteAssumedLifetime(provider: provider, reason: reason) }
        if request.refreshToken == nil, !isHAT {
            logger.info(
                "credential has no refresh token; it is served until it expires", metadata: ["user_identifier": "\(request.userIdentifier)"]
            )
        }
        let credential = Credential(
            userIdentifier: request.userIdentifier,
            provider: request.provider,
            accessToken: response.accessToken,
            refreshToken: response.refreshToken,
            tokenType: response.tokenType,
            scope: response.scope,
            expiresAt: lifetime.expiresAt,
            issuedAt: lifetime.issuedAt,
            sessionStartedAt: lifetime.issuedAt,
            readers: readers,
            enrolment: Enrolment(uid: caller.uid, pid: caller.pid, at: received),
            status: RefreshStatus(state: .valid)
        )

        await lock(request.userIdentifier)
        defer { unlock(request.userIdentifier) }
        try EnrolmentRules.checkExisting(
            view[request.userIdentifier]?.readers, user: request.userIdentifier, replace: request.replace, caller: caller, policy: policy,
            denied: { logDenied(caller, action: "replace", user: request.userIdentifier) }
        )
        try EnrolmentRules.checkQuota(
            user: request.userIdentifier, caller: caller, policy: policy, quotas: settings.current.quotas, view: view,
            pending: pendingEnrolments[caller.uid, default: 0],
            refused: { refusal in logQuota(caller, refusal: refusal, user: request.userIdentifier) }
        )
        pendingEnrolments[caller.uid, default: 0] += 1
        defer {
            pendingEnrolments.decrementCount(caller.uid)
        }
        let stored: Credential
        do {
            stored = try await store.insert(credential, replacing: request.replace)
        } catch let error as StorageError where error.code == .alreadyExists {
            throw .credentialExists(request.userIdentifier)
        } catch {
            logger.error("storing a credential failed: \(error)", metadata: ["user_identifier": "\(request.userIdentifier)"])
            throw .storageFailed("the credential could not be stored")
        }
        failures[stored.userIdentifier] = nil
        lastForced[stored.userIdentifier] = nil
        plan(stored, providers: settings.current.providers)
        view.store(entry(for: stored, providers: settings.current.providers))
        logger.info(
            "credential added",
            metadata: [
                "user_identifier": "\(stored.userIdentifier)", "provider": "\(stored.provider)",
                "uid": "\(caller.uid)", "pid": "\(caller.pid)", "readers": "\(readers.map(\.description).joined(separator: ","))",
            ])
    }

    func remove(_ userIdentifier: String, caller: CallerIdentity) async throws(VarlinkError) {
        guard let existing = view[userIdentifier] else { throw .unknownUser(userIdentifier) }
        guard settings.current.accessPolicy.mayManage(caller, readers: existing.readers) else {
            logDenied(caller, action: "remove", user: userIdentifier)
            throw .permissionDenied(userIdentifier)
        }
        await lock(userIdentifier)
        defer { unlock(userIdentifier) }
        let stored: Credential?
        do {
            stored = try await store.load(userIdentifier: userIdentifier)
        } catch {
            throw .storageFailed("the credential could not be read")
        }
        guard let stored else {
            view.remove(userIdentifier)
            throw .unknownUser(userIdentifier)
        }
        // Revoke first (RFC 7009), so the refresh token dies with the credential. A provider
        // that cannot be reached does not stop the removal the caller asked for.
        if let refresher = refreshers.byProvider[stored.provider] {
            if let problem = await refresher.revoke(stored) {
                logger.warning(
                    "revoking the refresh token failed; removing the credential anyway",
                    metadata: [
                        "user_identifier": "\(userIdentifier)", "provider": "\(stored.provider)", "problem": "\(problem)",
                    ])
            } else {
                logger.info("refresh token revoked", metadata: ["user_identifier": "\(userIdentifier)", "provider": "\(stored.provider)"])
            }
        }
        do {
            _ = try await store.remove(userIdentifier: userIdentifier)
        } catch {
            logger.error("removing a credential failed: \(error)", metadata: ["user_identifier": "\(userIdentifier)"])
            throw .storageFailed("the credential could not be removed")
        }
        // Invalidated before the reply goes out: once removal is acknowledged, no caller gets the token.
        view.remove(userIdentifier)
        schedule.cancel(userIdentifier)
        warnings.cancel(userIdentifier)
        failures[userIdentifier] = nil
        lastForced[userIdentifier] = nil
        logger.info(
            "credential removed", metadata: ["user_identifier": "\(userIdentifier)", "uid": "\(caller.uid)", "pid": "\(caller.pid)"])
    }

    // MARK: Backup

    /// A consistent copy of the store (administrators only; the router checks).
    func backup(caller: CallerIdentity) async throws(VarlinkError) -> StoreBackup {
        do {
            let backup = try await store.backup()
            logger.notice(
                "store backed up",
                metadata: [
                    "credentials": "\(backup.credentials)", "bytes": "\(backup.bytes.count)", "uid": "\(caller.uid)",
                    "pid": "\(caller.pid)",
                ])
            return backup
        } catch let error as StorageError where error.code == .unsupported || error.code == .fileSystem {
            throw .storageFailed(error.message)
        } catch {
            logger.error("backup failed: \(error)")
            throw .storageFailed("the backup could not be made")
        }
    }

    // MARK: Keys

    func rotateKey(caller: CallerIdentity) async throws(VarlinkError) -> (String, Int) {
        if coordination.nodeName != nil {
            // The new key would exist on this node only; the others could not open what it seals.
            throw .keyRotationUnavailable("the store is shared with other nodes; install a new key file on every node instead")
        }
        do {
            let result = try await keys.rotate(store: store)
            logger.notice(
                "master key rotated",
                metadata: ["key_id": "\(result.keyID)", "reencrypted": "\(result.reencrypted)", "uid": "\(caller.uid)"])
            return (result.keyID, result.reencrypted)
        } catch let error as KeyManagement.RotationUnavailable {
            throw .keyRotationUnavailable(error.description)
        } catch let error as StorageError where error.code == .rotationRefused {
            throw .keyRotationUnavailable(error.message)
        } catch {
            logger.error("key rotation failed: \(error)")
            throw .storageFailed("key rotation failed")
        }
    }

    // MARK: View entries

    func policy(for provider: String, providers: [String: ProviderConfiguration]) -> RefreshPolicy {
        providers[provider]?.refreshPolicy ?? RefreshPolicy()
    }

    func entry(for credential: Credential, providers: [String: ProviderConfiguration]) -> ViewEntry {
        ViewEntry(
            credential: credential, policy: policy(for: credential.provider, providers: providers),
            resolvedReaders: SystemIdentity.resolve(credential.readers), nextRefreshAt: schedule.dueTime(of: credential.userIdentifier)
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

    /// A refused enrolment, logged once a minute per uid at most (a flood is one line).
    func logQuota(_ caller: CallerIdentity, refusal: QuotaRefusal, user: String) {
        let refused = quotaReports.record(uid: caller.uid, now: .now)
        guard refused > 0 else { return }
        logger.notice(
            "credential refused: per-user limit reached",
            metadata: [
                "uid": "\(caller.uid)", "pid": "\(caller.pid)", "quota": "\(refusal.quota.rawValue)", "limit": "\(refusal.limit)",
                "user_identifier": "\(user)", "refused": "\(refused)",
            ])
    }

    func logDenied(_ caller: CallerIdentity, action: String, user: String) {
        logger.notice(
            "permission denied",
            metadata: [
                "uid": "\(caller.uid)", "gid": "\(caller.gid)", "pid": "\(caller.pid)", "action": "\(action)", "user_identifier": "\(user)",
            ])
    }
}

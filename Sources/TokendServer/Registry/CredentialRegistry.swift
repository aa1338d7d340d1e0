import Logging
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
    var schedule = RefreshSchedule()
    var warnings = RefreshSchedule()
    var failures: [String: Int] = [:]
    var lastForced: [String: Timestamp] = [:]
    var buckets: [String: TokenBucket] = [:]
    var sleeper: CheckedContinuation<Void, Never>?
    var sleepTarget: Timestamp?
    var sleepTimer: Task<Void, Never>?
    /// Counts for status and tests.
    var grantsStarted = 0

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
    func loadAll() async throws -> Int {
        let credentials = try await store.loadAll()
        let providers = settings.current.providers
        var recovering = 0
        for credential in credentials {
            if providers[credential.provider] == nil {
                logger.warning("credential refers to a provider that is not configured", metadata: [
                    "user_identifier": "\(credential.userIdentifier)", "provider": "\(credential.provider)",
                ])
            }
            if credential.status.grantStartedAt != nil || credential.status.state == .refreshing {
                // The grant may have reached the provider; retry at once with the refresh token
                // the store still holds, inside the provider's reuse grace if it has one.
                schedule.schedule(credential.userIdentifier, at: Timestamp(millisecondsSince1970: 0))
                recovering += 1
            } else {
                plan(credential, providers: providers)
            }
        }
        // Built after planning, so each entry shows its next refresh.
        view.replaceAll(with: credentials.map { entry(for: $0, providers: providers) })
        if recovering > 0 {
            logger.notice("refreshing credentials whose grant was interrupted", metadata: ["count": "\(recovering)"])
        }
        tokenFiles.apply(settings.current.tokenFiles) { [view] in view[$0] }
        return credentials.count
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

    func add(_ request: AddCredentialRequest, caller: CallerIdentity) async throws(VarlinkError) {
        guard Identifier.isValid(request.userIdentifier) else { throw .invalidParameter("userIdentifier") }
        guard settings.current.providers[request.provider] != nil else { throw .unknownProvider(request.provider) }
        let readers: [Reader]
        if let texts = request.readers {
            var parsed: [Reader] = []
            for text in texts {
                guard let reader = Reader(text) else { throw .invalidParameter("readers") }
                parsed.append(reader)
            }
            guard !parsed.isEmpty else { throw .invalidParameter("readers") }
            readers = parsed
        } else {
            readers = [.uid(caller.uid)]
        }
        let policy = settings.current.accessPolicy
        guard policy.mayManage(caller, readers: readers) else {
            logDenied(caller, action: "add", user: request.userIdentifier)
            throw .permissionDenied(request.userIdentifier)
        }

        var object = JSONObject()
        object["access_token"] = .string(request.accessToken)
        object.setIfPresent("refresh_token", request.refreshToken.map(JSONValue.string))
        object.setIfPresent("token_type", request.tokenType.map(JSONValue.string))
        object.setIfPresent("expires_in", request.expiresIn.map(JSONValue.int))
        object.setIfPresent("scope", request.scope.map(JSONValue.string))
        let received = now()
        let response: TokenResponse
        let lifetime: (issuedAt: Timestamp, expiresAt: Timestamp)
        do {
            // The same validation as a token endpoint's answer: printable tokens, a known lifetime.
            response = try TokenResponse.parse(object)
            lifetime = try response.lifetime(receivedAt: received)
        } catch {
            throw .invalidCredential(error.description)
        }
        if request.refreshToken == nil {
            logger.info("credential has no refresh token; it is served until it expires", metadata: ["user_identifier": "\(request.userIdentifier)"])
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
        if let existing = view[request.userIdentifier] {
            guard request.replace else { throw .credentialExists(request.userIdentifier) }
            guard policy.mayManage(caller, readers: existing.readers) else {
                logDenied(caller, action: "replace", user: request.userIdentifier)
                throw .permissionDenied(request.userIdentifier)
            }
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
        logger.info("credential added", metadata: [
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
                logger.warning("revoking the refresh token failed; removing the credential anyway", metadata: [
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
        logger.info("credential removed", metadata: ["user_identifier": "\(userIdentifier)", "uid": "\(caller.uid)", "pid": "\(caller.pid)"])
    }

    // MARK: Keys

    func rotateKey(caller: CallerIdentity) async throws(VarlinkError) -> (String, Int) {
        do {
            let result = try await keys.rotate(store: store)
            logger.notice("master key rotated", metadata: ["key_id": "\(result.keyID)", "reencrypted": "\(result.reencrypted)", "uid": "\(caller.uid)"])
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

    func rebuiltEntry(_ old: ViewEntry, providers: [String: ProviderConfiguration], status: RefreshStatus? = nil, nextRefreshAt: Timestamp?? = nil) -> ViewEntry {
        ViewEntry(
            rebuilding: old, policy: policy(for: old.provider, providers: providers), resolvedReaders: SystemIdentity.resolve(old.readers),
            status: status ?? old.status, nextRefreshAt: nextRefreshAt ?? old.nextRefreshAt
        )
    }

    func logDenied(_ caller: CallerIdentity, action: String, user: String) {
        logger.notice("permission denied", metadata: [
            "uid": "\(caller.uid)", "gid": "\(caller.gid)", "pid": "\(caller.pid)", "action": "\(action)", "user_identifier": "\(user)",
        ])
    }
}

import TokendConfig
import TokendCore
import TokendProtocol
import TokendStorage

/// Which token a node meant to replace, to tell whether another node already replaced it.
struct TokenMark: Equatable {
    var issuedAt: Timestamp
    var expiresAt: Timestamp
    var refreshCount: Int64

    init(_ entry: ViewEntry) {
        (issuedAt, expiresAt, refreshCount) = (entry.issuedAt, entry.expiresAt, entry.status.refreshCount)
    }

    init(_ credential: Credential) {
        (issuedAt, expiresAt, refreshCount) = (credential.issuedAt, credential.expiresAt, credential.status.refreshCount)
    }
}

/// Nodes sharing one store: each grant takes the credential's refresh lease first, or waits
/// for the node that holds it and adopts its result.
///
/// A node holds at most as many leases as it has grant slots (``CredentialRegistry/leasePermits``):
/// a lease is taken when its grant can start, not when the credential falls due. In a refresh
/// wave every due credential's grant starts at once on every node; taking each lease then would
/// let a lease run out while its grant still waits for a slot, hand that credential to another
/// node mid-wait, and make the other nodes wait on grants that have not begun. A grant that
/// waits for another node's result gives its permit back meanwhile.
struct SharedStoreGate: RefreshGate {
    let coordination: any RefreshCoordination

    var keyRotationRefusal: String? {
        // The new key would exist on this node only; the others could not open what it seals.
        "the store is shared with other nodes; install a new key file on every node instead"
    }

    var takeOver: TakeOverCheck? { TakeOverCheck(coordination: coordination) }

    func leave(_ lease: RefreshLease, registry: isolated CredentialRegistry) async {
        await coordination.releaseLease(lease)
        registry.releaseLeasePermit()
    }

    /// Takes the refresh lease of `user`, or waits for the node that holds it and answers with
    /// its result.
    ///
    /// Bounded: each round waits at most until the holder's lease expires, and there are at
    /// most 16 rounds.
    func enter(_ user: String, registry: isolated CredentialRegistry) async -> LeaseStep {
        let seen = registry.view[user].map(TokenMark.init)
        for _ in 0..<16 {
            await registry.acquireLeasePermit(for: user)
            // Another node's result may have arrived while this grant waited for its turn.
            if let settled = settledElsewhere(user, seen: seen, registry: registry) {
                registry.releaseLeasePermit()
                return .settled(settled)
            }
            switch await coordination.acquireLease(user) {
            case .granted(let lease):
                // The view holds the stored row, and it is the token this grant meant to replace:
                // nothing to read before the grant reads it.
                if let stored = lease.storedGeneration, let entry = registry.view[user], entry.generation == stored,
                    TokenMark(entry) == seen
                {
                    noteTakeOver(of: entry, registry: registry)
                    return .granted(lease)
                }
                if let adopted = await adoptIfRefreshedElsewhere(user, seen: seen, registry: registry) {
                    await coordination.releaseLease(lease)
                    registry.releaseLeasePermit()
                    return .settled(adopted)
                }
                if let entry = registry.view[user] { noteTakeOver(of: entry, registry: registry) }
                return .granted(lease)
            case .heldElsewhere(let holder, let expiresAt):
                registry.releaseLeasePermit()
                registry.logger.debug(
                    "another node is refreshing; waiting for its result",
                    metadata: [
                        "user_identifier": "\(user)", "lease_holder": "\(holder)",
                    ])
                await coordination.waitForChange(of: user, until: expiresAt + .milliseconds(250))
                if let settled = settledElsewhere(user, seen: seen, registry: registry) { return .settled(settled) }
            case .unavailable(let reason):
                registry.releaseLeasePermit()
                return .settled(.failed(postponeRefresh(user, reason: reason, registry: registry)))
            }
        }
        return .settled(.failed(.refreshFailed(user, reason: "other nodes kept the refresh lease; retrying later", retryAt: nil)))
    }

    /// The row is marked by a grant this node did not make (another node's, or this node's
    /// before a restart) and the lease was free: that grant was cut off, and this one sends it
    /// again with the same refresh token.
    private func noteTakeOver(of entry: ViewEntry, registry: isolated CredentialRegistry) {
        guard entry.status.state == .refreshing else { return }
        registry.logger.notice(
            "sending again a grant that another node, or this one before a restart, left in flight",
            metadata: [
                "user_identifier": "\(entry.userIdentifier)",
                "grant_started_at": "\(entry.status.grantStartedAt?.secondsSince1970 ?? 0)",
            ])
    }

    /// The answer this node's view already has, if another node replaced the token this grant
    /// meant to replace (or the credential is gone or needs a new login).
    private func settledElsewhere(_ user: String, seen: TokenMark?, registry: isolated CredentialRegistry) -> GrantResult? {
        guard let entry = registry.view[user] else { return .failed(.unknownUser(user)) }
        if entry.status.state == .reauthenticationRequired {
            return .failed(.reauthenticationRequired(user, reason: entry.status.lastError ?? "the login has ended"))
        }
        return TokenMark(entry) != seen ? .refreshed(entry) : nil
    }

    /// After taking the lease: if the stored token is no longer the one this node meant to
    /// replace, another node refreshed it in the meantime; adopt that instead of spending the
    /// refresh token again.
    private func adoptIfRefreshedElsewhere(_ user: String, seen: TokenMark?, registry: isolated CredentialRegistry) async -> GrantResult? {
        guard let stored = try? await registry.store.load(userIdentifier: user), TokenMark(stored) != seen else { return nil }
        await registry.lock(user)
        defer { registry.unlock(user) }
        let entry = registry.publishStored(stored)
        if entry.status.state == .reauthenticationRequired {
            return .failed(.reauthenticationRequired(user, reason: entry.status.lastError ?? "the login has ended"))
        }
        return .refreshed(entry)
    }

    /// The store cannot be reached: nothing is refreshed; try again with backoff. Tokens still
    /// valid in memory keep being served.
    private func postponeRefresh(_ user: String, reason: String, registry: isolated CredentialRegistry) -> VarlinkError {
        let attempts = registry.grants.recordFailure(of: user)
        let delay = registry.retryDelay(attempt: attempts)
        registry.planRetry(user, after: delay)
        registry.logger.warning(
            "the credential store is unavailable; refresh postponed",
            metadata: [
                "user_identifier": "\(user)", "problem": "\(reason)", "attempt": "\(attempts)",
                "retry_in": "\(DurationFormat.humanReadable(delay))",
            ])
        return .refreshFailed(
            user, reason: "the credential store is unavailable; the refresh will be retried",
            retryAt: (registry.now() + delay).secondsSince1970)
    }
}

/// Other nodes' writes applied to this node's view, so that `Watch`, token files and the
/// scheduler here see them.
extension CredentialRegistry {
    /// Waits for one of this node's lease permits (``SharedStoreGate``), in its owner's turn.
    func acquireLeasePermit(for user: String) async {
        if leasePermits.tryAcquire() { return }
        let owner = view[user]?.resolvedReaders.owner ?? .unresolved
        await withCheckedContinuation { continuation in leasePermits.enqueue(continuation, owner: owner) }
    }

    func releaseLeasePermit() { leasePermits.release() }

    /// Installs the shared store's coordination (before ``loadAll()``).
    func useCoordination(_ coordination: any RefreshCoordination) {
        gate = coordination.nodeName == nil ? SingleHostGate() : SharedStoreGate(coordination: coordination)
    }

    /// Publishes a credential read from the store (written by another node) to the view, and
    /// plans its next refresh. Call under the user's lock.
    @discardableResult
    func publishStored(_ credential: Credential) -> ViewEntry {
        let user = credential.userIdentifier
        let providers = settings.current.providers
        if let current = view[user], current.generation >= credential.generation { return current }
        grants.setFailures(nil, of: user)
        if credential.status.state == .reauthenticationRequired || providers[credential.provider] == nil {
            scheduler.cancel(user)
            let entry = entry(for: credential, providers: providers)
            view.store(entry)
            return entry
        }
        return updateView(credential, provider: providers[credential.provider]!)
    }

    /// A change committed by another node (or by this one: then the view already has it):
    /// reload the credential and publish it, or drop it if it was removed.
    func applyStoredChange(_ user: String, generation: Int64?) async {
        if let generation, let current = view[user], current.generation >= generation { return }
        await lock(user)
        defer { unlock(user) }
        do {
            if let stored = try await store.load(userIdentifier: user) {
                publishStored(stored)
            } else if view[user] != nil {
                view.remove(user)
                scheduler.cancel(user)
                grants.forget(user)
                logger.info("credential removed by another node", metadata: ["user_identifier": "\(user)"])
            }
        } catch {
            logger.warning(
                "reloading a credential changed by another node failed",
                metadata: [
                    "user_identifier": "\(user)", "problem": "\(error)",
                ])
        }
    }

    /// Changes committed by other nodes, applied together: the credentials whose view is older
    /// are read in one query and published under their locks; one the read did not return (gone,
    /// or refused by its integrity check) goes through ``applyStoredChange(_:generation:)``, which
    /// tells the two apart, as does a removal.
    func applyStoredChanges(_ changes: [String: Int64?]) async {
        var stale: [String] = []
        for (user, generation) in changes {
            guard let generation else {
                await applyStoredChange(user, generation: nil)
                continue
            }
            if let current = view[user], current.generation >= generation { continue }
            stale.append(user)
        }
        guard !stale.isEmpty else { return }
        let loaded: [Credential]
        do {
            loaded = try await store.load(userIdentifiers: stale)
        } catch {
            logger.warning(
                "reloading credentials changed by other nodes failed; the next reconciliation retries",
                metadata: ["count": "\(stale.count)", "problem": "\(error)"])
            return
        }
        var missing = Set(stale)
        for credential in loaded {
            let user = credential.userIdentifier
            missing.remove(user)
            await lock(user)
            publishStored(credential)
            unlock(user)
        }
        for user in missing { await applyStoredChange(user, generation: changes[user] ?? nil) }
    }

    /// Compares every generation with the store's and reloads what differs (a missed
    /// notification, a reconnection).
    func reconcile(with stored: [String: Int64]) async {
        for entry in view.unsortedSnapshot() where stored[entry.userIdentifier] == nil {
            await applyStoredChange(entry.userIdentifier, generation: nil)
        }
        for (user, generation) in stored where (view[user]?.generation ?? Int64.min) < generation {
            await applyStoredChange(user, generation: generation)
        }
    }
}

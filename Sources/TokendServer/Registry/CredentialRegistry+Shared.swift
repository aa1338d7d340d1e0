import TokendConfig
import TokendCore
import TokendProtocol
import TokendStorage

/// What a node found when it asked for a credential's refresh lease.
enum LeaseStep: Sendable {
    /// Refresh now, then release the lease.
    case granted(RefreshLease)
    /// No grant from this node: another node's result (or an error) is the answer.
    case settled(GrantResult)
}

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

/// Several nodes sharing one store: refresh leases around each grant, and other nodes' writes
/// applied to this node's view (so `Watch` and token files here see them).
extension CredentialRegistry {
    /// Installs the shared store's coordination (before ``loadAll()``).
    func useCoordination(_ coordination: any RefreshCoordination) { self.coordination = coordination }

    /// Takes the refresh lease of `user`, or waits for the node that holds it and answers with
    /// its result. A single host is granted at once.
    ///
    /// Bounded: each round waits at most until the holder's lease expires, and there are at
    /// most 16 rounds.
    func takeRefreshLease(_ user: String) async -> LeaseStep {
        guard coordination.nodeName != nil else {
            // One host: the registry's single flight is all the coordination there is.
            return .granted(RefreshLease(userIdentifier: user, holder: "", fencing: 0, expiresAt: Timestamp(millisecondsSince1970: .max)))
        }
        let seen = view[user].map(TokenMark.init)
        for _ in 0..<16 {
            switch await coordination.acquireLease(user) {
            case .granted(let lease):
                if let adopted = await adoptIfRefreshedElsewhere(user, seen: seen) {
                    await coordination.releaseLease(lease)
                    return .settled(adopted)
                }
                return .granted(lease)
            case .heldElsewhere(let holder, let expiresAt):
                logger.debug(
                    "another node is refreshing; waiting for its result",
                    metadata: [
                        "user_identifier": "\(user)", "lease_holder": "\(holder)",
                    ])
                await coordination.waitForChange(of: user, until: expiresAt + .milliseconds(250))
                guard let entry = view[user] else { return .settled(.failed(.unknownUser(user))) }
                if entry.status.state == .reauthenticationRequired {
                    return .settled(.failed(.reauthenticationRequired(user, reason: entry.status.lastError ?? "the login has ended")))
                }
                if TokenMark(entry) != seen { return .settled(.refreshed(entry)) }
            case .unavailable(let reason):
                return .settled(.failed(postponeRefresh(user, reason: reason)))
            }
        }
        return .settled(.failed(.refreshFailed(user, reason: "other nodes kept the refresh lease; retrying later", retryAt: nil)))
    }

    /// After taking the lease: if the stored token is no longer the one this node meant to
    /// replace, another node refreshed it in the meantime; adopt that instead of spending the
    /// refresh token again.
    private func adoptIfRefreshedElsewhere(_ user: String, seen: TokenMark?) async -> GrantResult? {
        guard let stored = try? await store.load(userIdentifier: user), TokenMark(stored) != seen else { return nil }
        await lock(user)
        defer { unlock(user) }
        let entry = publishStored(stored)
        if entry.status.state == .reauthenticationRequired {
            return .failed(.reauthenticationRequired(user, reason: entry.status.lastError ?? "the login has ended"))
        }
        return .refreshed(entry)
    }

    /// The store cannot be reached: nothing is refreshed; try again with backoff. Tokens still
    /// valid in memory keep being served.
    private func postponeRefresh(_ user: String, reason: String) -> VarlinkError {
        let attempts = (failures[user] ?? 0) + 1
        failures[user] = attempts
        let backoff = Backoff(initial: limits.retryInitial, maximum: limits.retryMaximum)
        let retryAt = now() + backoff.delay(attempt: attempts, random: Double.random(in: 0..<1))
        schedule.schedule(user, at: retryAt)
        wake()
        logger.warning(
            "the credential store is unavailable; refresh postponed",
            metadata: [
                "user_identifier": "\(user)", "problem": "\(reason)", "attempt": "\(attempts)",
                "retry_in": "\(DurationFormat.humanReadable(retryAt - now()))",
            ])
        return .refreshFailed(
            user, reason: "the credential store is unavailable; the refresh will be retried", retryAt: retryAt.secondsSince1970)
    }

    /// Publishes a credential read from the store (written by another node) to the view, and
    /// plans its next refresh. Call under the user's lock.
    @discardableResult
    func publishStored(_ credential: Credential) -> ViewEntry {
        let user = credential.userIdentifier
        let providers = settings.current.providers
        if let current = view[user], current.generation >= credential.generation { return current }
        failures[user] = nil
        if credential.status.state == .reauthenticationRequired || providers[credential.provider] == nil {
            schedule.cancel(user)
            warnings.cancel(user)
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
                schedule.cancel(user)
                warnings.cancel(user)
                failures[user] = nil
                lastForced[user] = nil
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

    /// Compares every generation with the store's and reloads what differs (a missed
    /// notification, a reconnection).
    func reconcile(with stored: [String: Int64]) async {
        for entry in view.snapshot() where stored[entry.userIdentifier] == nil {
            await applyStoredChange(entry.userIdentifier, generation: nil)
        }
        for (user, generation) in stored where (view[user]?.generation ?? Int64.min) < generation {
            await applyStoredChange(user, generation: generation)
        }
    }
}

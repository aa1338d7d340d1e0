import Logging
import TokendConfig
import TokendCore
import TokendProtocol
import TokendStorage

/// What one grant achieved.
enum GrantResult: Sendable {
    case refreshed(ViewEntry)
    /// A narrowed grant's token (``CredentialRegistry/narrowedToken(for:narrowing:minimumValidity:rejectedToken:)``).
    case narrowed(NarrowedServing)
    case failed(VarlinkError)
}

extension CredentialRegistry {
    /// An entry that satisfies `reason`, refreshing if need be. Callers that need the same
    /// credential refreshed share one grant.
    func freshEntry(for userIdentifier: String, reason: RefreshReason, caller: CallerIdentity) async throws(VarlinkError) -> ViewEntry {
        guard let entry = view[userIdentifier] else { throw .unknownUser(userIdentifier) }
        let current = now()
        switch reason {
        case .tooShortLived(let validity):
            if ServeDecision.decide(deadline: entry.deadline, now: current, minimumValidity: validity) == .serve { return entry }
        case .rejectedByAPI(let generation):
            // Already replaced since the caller got its token: the current one is the answer.
            if entry.generation != generation, current < entry.deadline { return entry }
        case .proactive, .recovery:
            break
        }
        if entry.status.state == .reauthenticationRequired {
            throw .reauthenticationRequired(userIdentifier, reason: entry.status.lastError ?? "the login has ended")
        }
        if grants.grantInFlight(of: userIdentifier) == nil, reason.isCallerTriggered {
            switch CallerRefreshRule.decide(
                tokenValid: current < entry.deadline, rejectedByAPI: reason.isRejection,
                // A login's receipt is recorded as `lastRefreshAt` too (``RevocationRule``); the
                // interval counts from refresh grants only, so a new login can be refreshed at once.
                lastRefreshAt: entry.status.refreshCount > 0 ? entry.status.lastRefreshAt : nil,
                lastForcedAt: grants.lastForcedRefresh(of: userIdentifier),
                retryAt: entry.status.state == .retrying ? entry.status.retryAt : nil,
                interval: limits.forcedRefreshInterval, now: current
            ) {
            case .refresh:
                grants.noteForcedRefresh(of: userIdentifier, at: current)
            case .serveCurrent:
                return entry
            case .refuseRecentlyRefreshed(let nextAllowed):
                throw .refreshFailed(
                    userIdentifier,
                    reason:
                        "the token was refreshed less than \(DurationFormat.humanReadable(limits.forcedRefreshInterval)) ago; another refresh is allowed in \(DurationFormat.humanReadable(nextAllowed - current))",
                    retryAt: nextAllowed.secondsSince1970
                )
            case .refuseFailing(let retryAt):
                throw .refreshFailed(
                    userIdentifier,
                    reason:
                        "the token has expired and refreshing it failed: \(entry.status.lastError ?? "unknown reason"); the next attempt is in \(DurationFormat.humanReadable(retryAt - current))",
                    retryAt: retryAt.secondsSince1970
                )
            }
        }
        switch await join(userIdentifier, reason: reason) {
        case .refreshed(let fresh): return fresh
        case .failed(let error): throw error
        case .narrowed: throw .refreshFailed(userIdentifier, reason: "internal error: a narrowed token answered a refresh", retryAt: nil)
        }
    }

    /// From now on, proactive grants that have not sent their request do not start: the daemon
    /// is stopping. Grants already talking to their provider finish and commit (a rotated
    /// refresh token is never lost to a stop); those still queued for a grant slot — most of a
    /// refresh storm — end at once instead of holding the stop up to `shutdown_timeout`, and a
    /// grant started after the stop's wait can no longer be cut off by the HTTP client's
    /// shutdown with its marker written. Their credentials are still due at the next start, so
    /// they are refreshed then. Caller-triggered grants still run: their callers are answered.
    func stopStartingProactiveGrants() {
        grants.stopStartingProactiveGrants()
    }

    /// Starts the grant for `user`, or joins the one in flight.
    func join(_ userIdentifier: String, reason: RefreshReason) async -> GrantResult {
        guard let task = startGrant(userIdentifier, reason: reason) else { return .failed(Self.stopping(userIdentifier)) }
        return await task.value
    }

    /// The grant in flight for `user`, started now if there is none; nil if a proactive grant
    /// may no longer start (the daemon is stopping). The scheduler calls this directly: it
    /// needs no result, so no task of its own waiting for one.
    @discardableResult
    func startGrant(_ userIdentifier: String, reason: RefreshReason) -> Task<GrantResult, Never>? {
        if let task = grants.grantInFlight(of: userIdentifier) { return task }
        if grants.stoppingProactiveGrants, !reason.isCallerTriggered { return nil }
        let task = Task { await self.performGrant(userIdentifier, reason: reason) }
        grants.startFlight(task, of: userIdentifier)
        return task
    }

    /// One refresh grant, from marking it in flight to committing its result.
    private func performGrant(_ user: String, reason: RefreshReason) async -> GrantResult {
        defer { grants.endFlight(of: user) }
        // A narrowed grant may be spending the refresh token: this one reads it after that.
        await lockRefreshToken(user)
        defer { unlockRefreshToken(user) }
        // Phase 0: the gate — free on one host; when several nodes share the store, the
        // credential's refresh lease or the result of the node that holds it.
        let gate = self.gate
        let lease: RefreshLease
        switch await gate.enter(user, registry: self) {
        case .granted(let granted): lease = granted
        case .settled(let result): return result
        }
        let result = await grant(user, reason: reason)
        await gate.leave(lease, registry: self)
        return result
    }

    /// Phases 1–3 of a grant, under this node's lease.
    ///
    /// A grant holds one of the `max_grants_in_flight` slots from before it marks the credential
    /// until its provider has answered: the cap bounds the requests a provider sees at once. The
    /// commit runs after the slot is free, so in a refresh storm the next grant's marker and
    /// this grant's result share one store transaction (``storeGrouping(for:)``).
    ///
    /// With `narrowing`, the grant asks for a narrowed token instead (its commit is
    /// ``commitNarrowed(_:for:narrowing:provider:grouping:stateBefore:unresolvedBefore:)``): it
    /// spends the same refresh token, so it takes the same slot, marker and lease.
    func grant(_ user: String, reason: RefreshReason, narrowing: TokenNarrowing? = nil) async -> GrantResult {
        await acquireSlot(for: user)
        var holdsSlot = true
        defer { if holdsSlot { releaseSlot() } }
        // Queued for a slot when the daemon began to stop: a proactive grant does not start now.
        if grants.stoppingProactiveGrants, !reason.isCallerTriggered { return .failed(Self.stopping(user)) }

        // Phase 1, under the user's lock: read the stored credential and record durably that a
        // grant is about to be sent, so a crash during it is noticed and recovered at start-up.
        await lock(user)
        let stateBefore = view[user]?.status.state
        // An earlier grant's outcome is still unknown (``GrantOutcome/unanswered(reason:)``, or
        // a crash): until a grant gets a definite answer, the marker stays.
        let markerBefore = view[user]?.status.grantStartedAt
        let unresolvedBefore = markerBefore != nil
        let prepared: (Credential, any ProviderRefresher, ProviderConfiguration)
        switch await prepareGrant(user, reason: reason) {
        case .success(let value): prepared = value
        case .failure(let error):
            unlock(user)
            return .failed(error)
        }
        let (credential, refresher, provider) = prepared
        // The stop may have begun while the marker waited for its group: nothing was sent yet,
        // so the marker goes again and the refresh runs at the next start. A narrowed grant is
        // checked again against the credential it is about to spend (the login may have been
        // replaced, the provider reconfigured, while it waited for its turn).
        let stopping = grants.stoppingProactiveGrants && !reason.isCallerTriggered
        let narrowingRefused = narrowing.flatMap { narrowingRefusal(credential, provider: provider, narrowing: $0) }
        if stopping || narrowingRefused != nil {
            var unmarked = credential
            unmarked.status.grantStartedAt = markerBefore
            unmarked.status.state = stateBefore.flatMap { $0 == .refreshing ? nil : $0 } ?? .valid
            await writeStatus(&unmarked)
            updateView(unmarked, provider: provider)
            unlock(user)
            return .failed(narrowingRefused.map { .invalidCredential($0) } ?? Self.stopping(user))
        }
        unlock(user)

        await waitForRateLimit(provider)
        logger.debug("refresh grant", metadata: ["user_identifier": "\(user)", "provider": "\(provider.name)", "reason": "\(reason)"])
        let stormPacing = storeGrouping(for: reason) > .zero ? Self.stormPacing : .zero
        let outcome = await refresher.refresh(credential, narrowing: narrowing, stormPacing: stormPacing, now: now)
        // Asked again, not reused from before the request: other grants' slots changed meanwhile.
        let grouping = storeGrouping(for: reason)
        releaseSlot()
        holdsSlot = false

        // Phase 3, under the lock again: commit whatever happened.
        await lock(user)
        defer { unlock(user) }
        if let narrowing {
            return await commitNarrowed(
                outcome, for: credential, narrowing: narrowing, provider: provider, grouping: grouping, stateBefore: stateBefore,
                unresolvedBefore: unresolvedBefore)
        }
        return await commit(outcome, for: credential, provider: provider, grouping: grouping, unresolvedBefore: unresolvedBefore)
    }

    private static func stopping(_ user: String) -> VarlinkError {
        .refreshFailed(user, reason: "tokend is stopping; the refresh runs at the next start", retryAt: nil)
    }

    /// How long this grant's store writes — its marker and its result — may wait to be
    /// committed with other grants' (see `GroupCommit` in TokendStorage). Only when nobody asked
    /// for this refresh and other grants are in flight — a refresh storm — where grouping turns
    /// a transaction, an fsync and two thread wake-ups per write into one per group: results of
    /// grants just answered and markers of the grants taking their slots commit together. The
    /// credential's current token stays valid and served meanwhile; a caller that joins such a
    /// grant waits at most twice this much longer.
    private func storeGrouping(for reason: RefreshReason) -> Duration {
        guard !reason.isCallerTriggered, slots.inUse > 1 else { return .zero }
        return Self.stormGrouping
    }

    /// See ``storeGrouping(for:)``: several grant answers' worth at a token endpoint's usual
    /// pace. A group's commit (WAL frames, the fsync) was a third of the writer's CPU in a 10k
    /// storm; 60 ms instead of 40 took a grant from 0.49 to ~0.45 ms of tokend's CPU, and the
    /// storm from 115 to ~95 grants/s (a marker waits for its group while its grant holds a slot).
    static let stormGrouping = Duration.milliseconds(60)

    /// The pacing of the HTTP loop while storm grants are outstanding (``StormPacer``), under the
    /// same conditions as ``storeGrouping(for:)``. The grant keeps its slot meanwhile; the
    /// provider, the bottleneck in a storm, still has the other slots' requests to work on.
    /// 50 ms: 100 ms saved another tenth of a millisecond per grant but cost a third of the
    /// storm's grants/s, since every grant waits up to one interval to be sent and one for its
    /// answer to be read.
    static let stormPacing = Duration.milliseconds(50)

    private func prepareGrant(_ user: String, reason: RefreshReason) async -> Result<
        (Credential, any ProviderRefresher, ProviderConfiguration), VarlinkError
    > {
        let grouping = storeGrouping(for: reason)
        let providers = settings.current.providers
        let refreshable = Set(refreshers.byProvider.keys)
        let current = now()
        // Read and mark in one store transaction; the checks run on the stored credential, and
        // whatever they refuse is explained below, outside the transaction.
        let start: GrantStart?
        do {
            start = try await store.beginGrant(userIdentifier: user, startedAt: current, grouping: grouping) { credential in
                Self.grantRefusal(credential, providers: providers, refreshable: refreshable, now: current) == nil
            }
        } catch {
            logger.error("recording a grant failed: \(error)", metadata: ["user_identifier": "\(user)"])
            // The scheduler consumed this credential's event: without a new one a proactive
            // refresh would never come back.
            if !reason.isCallerTriggered { planRetry(user, after: limits.retryInitial) }
            return .failure(.storageFailed("the grant could not be recorded"))
        }
        switch start {
        case nil:
            return .failure(.unknownUser(user))
        case .declined(let credential):
            switch Self.grantRefusal(credential, providers: providers, refreshable: refreshable, now: current) {
            case .providerMissing:
                return .failure(.refreshFailed(user, reason: "provider \(credential.provider) is not configured", retryAt: nil))
            case .sessionEnded(let provider):
                return .failure(await markReauthenticationRequired(credential, reason: sessionEndedReason(provider)))
            case .noRefreshToken, nil:
                return .failure(
                    .refreshFailed(user, reason: "the credential has no refresh token; add a new one or log in again", retryAt: nil))
            }
        case .started(let credential):
            guard let provider = providers[credential.provider], let refresher = refreshers.byProvider[credential.provider] else {
                return .failure(.refreshFailed(user, reason: "provider \(credential.provider) is not configured", retryAt: nil))
            }
            updateView(credential, provider: provider)
            return .success((credential, refresher, provider))
        }
    }

    /// Why a stored credential cannot be refreshed now, or nil if it can.
    enum GrantRefusal {
        case providerMissing
        case sessionEnded(ProviderConfiguration)
        case noRefreshToken
    }

    nonisolated static func grantRefusal(
        _ credential: Credential, providers: [String: ProviderConfiguration], refreshable: Set<String>, now current: Timestamp
    ) -> GrantRefusal? {
        guard let provider = providers[credential.provider], refreshable.contains(credential.provider) else { return .providerMissing }
        if let end = provider.refreshPolicy.sessionEnd(of: credential), current >= end { return .sessionEnded(provider) }
        if credential.refreshToken == nil, case .oauth2 = provider.kind { return .noRefreshToken }
        return nil
    }

    /// The commit of a refresh grant (``GrantCommit/refresh(_:of:context:)``), carried out.
    private func commit(
        _ outcome: GrantOutcome, for credential: Credential, provider: ProviderConfiguration, grouping: Duration, unresolvedBefore: Bool
    ) async -> GrantResult {
        let context = commitContext(credential, provider: provider, unresolvedBefore: unresolvedBefore)
        return await carryOut(
            GrantCommit.refresh(outcome, of: credential, context: context), for: credential, provider: provider, grouping: grouping)
    }

    /// What a commit now needs of the registry: the time, the attempt a failure would be, the backoff.
    func commitContext(_ credential: Credential, provider: ProviderConfiguration, unresolvedBefore: Bool) -> GrantCommitContext {
        GrantCommitContext(
            provider: provider.name, policy: provider.refreshPolicy, received: now(),
            attempt: grants.nextAttempt(of: credential.userIdentifier),
            backoff: Backoff(initial: limits.retryInitial, maximum: limits.retryMaximum), random: Double.random(in: 0..<1),
            unresolvedBefore: unresolvedBefore)
    }

    /// Carries out a grant's commit, its actions in order; a store write that fails ends it
    /// (``GrantAction/storeCredential(_:)``). `provider` is nil only for a credential whose
    /// provider is no longer configured (``markReauthenticationRequired(_:reason:)``).
    func carryOut(_ commit: GrantCommit, for credential: Credential, provider: ProviderConfiguration?, grouping: Duration) async
        -> GrantResult
    {
        let user = credential.userIdentifier
        let policy = provider?.refreshPolicy ?? RefreshPolicy()
        var next = commit.next
        var published: ViewEntry?
        for action in commit.actions {
            switch action {
            case .noteRefreshTokenNarrowed(let lost):
                if let provider { notices.refreshTokenNarrowed(provider: provider, userIdentifier: user, lost: lost) }
            case .dropServedNarrowedTokens:
                view.narrowedTokens.removeAll()
            case .noteAssumedLifetime(let reason):
                if let provider { notices.assumedLifetime(provider: provider, reason: reason) }
            case .storeCredential(let kind):
                do {
                    // Rotation is durable before any caller sees the new access token.
                    next = try await store.update(next, expectedGeneration: credential.generation, grouping: grouping)
                } catch let error as StorageError where error.code == .conflict || error.code == .notFound {
                    return storeConflict(kind, user: user)
                } catch {
                    return storeFailure(kind, user: user, error)
                }
            case .storeStatus:
                await writeStatus(&next)
            case .setFailures(let count):
                grants.setFailures(count, of: user)
            case .publish:
                published = publish(next)
            case .publishEnded:
                let providers = settings.current.providers
                if providers[next.provider] != nil {
                    published = publish(next)
                } else {
                    let entry = entry(for: next, providers: providers)
                    view.store(entry)
                    published = entry
                }
            case .cancelRefresh:
                scheduler.cancel(user)
            case .serveNarrowed(let token):
                view.narrowedTokens.keep(NarrowedServing(token, of: next, policy: policy), for: user)
            case .log(let line):
                let level: Logger.Level
                switch line.level {
                case .info: level = .info
                case .warning: level = .warning
                }
                logger.log(level: level, "\(line.message)", metadata: line.metadata.mapValues { .string($0) })
            }
        }
        switch commit.reply {
        case .entry:
            guard let entry = published ?? view[user] else { return .failed(.unknownUser(user)) }
            return .refreshed(entry)
        case .narrowed(let token):
            return .narrowed(NarrowedServing(token, of: next, policy: policy))
        case .refreshFailed(let reason, let retryAt):
            return .failed(.refreshFailed(user, reason: reason, retryAt: retryAt?.secondsSince1970))
        case .reauthenticationRequired(let reason):
            return .failed(.reauthenticationRequired(user, reason: reason))
        }
    }

    /// The credential was removed or replaced while the grant ran: the newer state wins.
    private func storeConflict(_ kind: GrantKind, user: String) -> GrantResult {
        switch kind {
        case .refresh:
            logger.notice("credential changed during its refresh; result discarded", metadata: ["user_identifier": "\(user)"])
            if let entry = view[user] { return .refreshed(entry) }
            return .failed(.unknownUser(user))
        case .narrowed:
            logger.notice("credential changed during a narrowed grant; result discarded", metadata: ["user_identifier": "\(user)"])
            return .failed(
                .refreshFailed(user, reason: "the credential changed while its narrowed token was being got; try again", retryAt: nil))
        }
    }

    /// The grant's result could not be stored. The credential is still marked in flight, so
    /// nothing else plans it: it is retried soon, as start-up would (the provider may have
    /// rotated the refresh token it still holds; its own grant recovers it).
    private func storeFailure(_ kind: GrantKind, user: String, _ error: any Error) -> GrantResult {
        switch kind {
        case .refresh:
            logger.error("storing refreshed tokens failed: \(error)", metadata: ["user_identifier": "\(user)"])
            planRetry(user, after: limits.retryInitial)
            return .failed(.storageFailed("the refreshed token could not be stored"))
        case .narrowed:
            logger.error("storing a narrowed token failed: \(error)", metadata: ["user_identifier": "\(user)"])
            planRetry(user, after: limits.retryInitial)
            return .failed(.storageFailed("the narrowed token could not be stored"))
        }
    }

    /// Moves a credential to *reauthentication required*: no more refreshes, no more serving.
    func markReauthenticationRequired(_ credential: Credential, reason: String) async -> VarlinkError {
        let provider = settings.current.providers[credential.provider]
        let commit = GrantCommit.reauthenticationRequired(of: credential, reason: reason)
        if case .failed(let error) = await carryOut(commit, for: credential, provider: provider, grouping: .zero) { return error }
        return .reauthenticationRequired(credential.userIdentifier, reason: reason)
    }

    func sessionEndedReason(_ provider: ProviderConfiguration) -> String {
        let age = provider.refreshPolicy.maxSessionAge.map(DurationFormat.humanReadable) ?? "?"
        if provider.refreshPolicy.expiryEndsSession {
            return "the login ended: its token's exp, which renewals do not move, or its maximum age of \(age) was reached; log in again"
        }
        return "the login reached its maximum age of \(age); log in again"
    }

    func writeStatus(_ credential: inout Credential) async {
        do {
            credential.generation = try await store.updateStatus(
                userIdentifier: credential.userIdentifier, status: credential.status, expectedGeneration: credential.generation
            )
        } catch {
            logger.error("recording refresh status failed: \(error)", metadata: ["user_identifier": "\(credential.userIdentifier)"])
        }
    }

    /// Publishes `credential` to the view and plans its next refresh.
    @discardableResult
    func updateView(_ credential: Credential, provider: ProviderConfiguration) -> ViewEntry { publish(credential) }

    /// Publishes `credential` to the view and plans its next refresh.
    @discardableResult
    func publish(_ credential: Credential) -> ViewEntry {
        let providers = settings.current.providers
        plan(credential, providers: providers)
        let entry = entry(for: credential, providers: providers)
        view.store(entry)
        return entry
    }

    // MARK: Limits

    /// A grant slot; when none is free, the grant waits its owner's turn (``GrantSlots``).
    private func acquireSlot(for user: String) async {
        if slots.tryAcquire() { return }
        let owner = view[user]?.resolvedReaders.owner ?? .unresolved
        await withCheckedContinuation { continuation in slots.enqueue(continuation, owner: owner) }
    }

    private func releaseSlot() { slots.release() }

    var grantsInFlightHighWater: Int { slots.highWater }

    /// Every grant in flight, the credentials' own and narrowed ones: a stop waits for them, so
    /// that a rotated refresh token is never lost to it.
    var grantsInFlight: [Task<GrantResult, Never>] { grants.allInFlight }

    private func waitForRateLimit(_ provider: ProviderConfiguration) async {
        let delay = grants.rateDelay(for: provider, now: now())
        if delay > .zero { try? await Task.sleep(for: delay) }
    }

    /// How long to wait after the `attempt`-th failure in a row; a provider's
    /// `Retry-After` is respected within the limits.
    func retryDelay(attempt: Int, retryAfter: Duration? = nil) -> Duration {
        let backoff = Backoff(initial: limits.retryInitial, maximum: limits.retryMaximum)
        return backoff.delay(attempt: attempt, retryAfter: retryAfter, random: Double.random(in: 0..<1))
    }
}

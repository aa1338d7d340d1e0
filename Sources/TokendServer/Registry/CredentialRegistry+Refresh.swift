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
        if grants.inFlight[userIdentifier] == nil, reason.isCallerTriggered {
            switch CallerRefreshRule.decide(
                tokenValid: current < entry.deadline, rejectedByAPI: reason.isRejection,
                // A login's receipt is recorded as `lastRefreshAt` too (``RevocationRule``); the
                // interval counts from refresh grants only, so a new login can be refreshed at once.
                lastRefreshAt: entry.status.refreshCount > 0 ? entry.status.lastRefreshAt : nil,
                lastForcedAt: grants.lastForced[userIdentifier],
                retryAt: entry.status.state == .retrying ? entry.status.retryAt : nil,
                interval: limits.forcedRefreshInterval, now: current
            ) {
            case .refresh:
                grants.lastForced[userIdentifier] = current
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
        grants.stoppingProactiveGrants = true
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
        if let task = grants.inFlight[userIdentifier] { return task }
        if grants.stoppingProactiveGrants, !reason.isCallerTriggered { return nil }
        let task = Task { await self.performGrant(userIdentifier, reason: reason) }
        grants.inFlight[userIdentifier] = task
        return task
    }

    /// One refresh grant, from marking it in flight to committing its result.
    private func performGrant(_ user: String, reason: RefreshReason) async -> GrantResult {
        defer { grants.inFlight[user] = nil }
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
        await gate.leave(lease)
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
        grants.started += 1
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

    /// - Parameter unresolvedBefore: An earlier grant's outcome is unknown; a transient failure
    ///   (which says nothing about that grant's refresh token) keeps the credential marked.
    private func commit(
        _ outcome: GrantOutcome, for credential: Credential, provider: ProviderConfiguration, grouping: Duration, unresolvedBefore: Bool
    ) async -> GrantResult {
        let user = credential.userIdentifier
        let received = now()
        switch outcome {
        case .success(let response):
            var next: Credential
            let policy = provider.refreshPolicy
            do {
                next = try credential.refreshed(with: response, receivedAt: received, assumedLifetime: policy.assumedLifetime)
            } catch {
                // The provider issued tokens (and may have rotated the refresh token): unknown.
                return await recordTransientFailure(
                    credential, provider: provider, reason: "the token endpoint's answer is unusable: \(error)", retryAfter: nil,
                    unanswered: true
                )
            }
            let rotated = response.refreshToken != nil
            // After narrowed grants, less scope than before means the provider narrowed the
            // refresh token itself (``NarrowingRules/scopeLost(before:after:)``). Such a provider
            // also treats the narrowed tokens as the refresh token's: they go.
            if !credential.narrowedTokens.isEmpty, let lost = NarrowingRules.scopeLost(before: credential.scope, after: response.scope) {
                notices.refreshTokenNarrowed(provider: provider, userIdentifier: user, lost: lost)
                next.narrowedTokens = []
                // No narrowed token of any credential is answered from memory any more: the next
                // requests reach the registry, which refuses this provider's.
                view.narrowedTokens.removeAll()
            }
            if let reason = response.lifetime(receivedAt: received, assumed: policy.assumedLifetime).assumedBecause {
                notices.assumedLifetime(provider: provider, reason: reason)
            }
            // A token no fresher than the one it replaces is kept (the refresh token may have
            // rotated) but does not count as a refresh: the next grant waits a backoff.
            let freshness = policy.freshness(of: next, replacing: credential, receivedAt: received)
            var staleness: String?
            switch freshness {
            case .fresher: break
            case .noFresher(let deadline):
                staleness =
                    "the provider answered with a token no fresher than the one it replaces (it expires in \(DurationFormat.humanReadable(deadline - received)))"
            case .expiredOnArrival:
                staleness = "the provider answered with a token that had already expired (check the provider's and this host's clocks)"
            }
            if freshness == .expiredOnArrival {
                // Nothing to serve in it: the current token stays (it may still be valid), the
                // new refresh token is kept.
                next.accessToken = credential.accessToken
                (next.tokenType, next.scope) = (credential.tokenType, credential.scope)
                (next.issuedAt, next.expiresAt) = (credential.issuedAt, credential.expiresAt)
            }
            let attempts = grants.nextAttempt(of: user)
            if let staleness {
                next.status.state = .retrying
                next.status.lastError = staleness
                next.status.retryAt = received + retryDelay(attempt: attempts)
            }
            do {
                // Rotation is durable before any caller sees the new access token.
                next = try await store.update(next, expectedGeneration: credential.generation, grouping: grouping)
            } catch let error as StorageError where error.code == .conflict || error.code == .notFound {
                // Removed or replaced while the grant ran: the newer state wins.
                logger.notice("credential changed during its refresh; result discarded", metadata: ["user_identifier": "\(user)"])
                if let entry = view[user] { return .refreshed(entry) }
                return .failed(.unknownUser(user))
            } catch {
                logger.error("storing refreshed tokens failed: \(error)", metadata: ["user_identifier": "\(user)"])
                // Still marked in flight, so nothing else plans it: retry soon, as start-up
                // would (the provider may have rotated the refresh token it still holds).
                planRetry(user, after: limits.retryInitial)
                return .failed(.storageFailed("the refreshed token could not be stored"))
            }
            if let staleness, let retryAt = next.status.retryAt {
                grants.failures[user] = attempts
                let entry = updateView(next, provider: provider)
                logger.warning(
                    "refresh brought no fresher token; will retry",
                    metadata: [
                        "user_identifier": "\(user)", "provider": "\(provider.name)", "problem": "\(staleness)", "attempt": "\(attempts)",
                        "retry_in": "\(DurationFormat.humanReadable(retryAt - received))", "credential_state": "retrying",
                        "rotated": "\(rotated)",
                    ])
                if freshness == .expiredOnArrival {
                    return .failed(.refreshFailed(user, reason: staleness, retryAt: retryAt.secondsSince1970))
                }
                return .refreshed(entry)
            }
            grants.failures[user] = nil
            let entry = updateView(next, provider: provider)
            logger.info(
                "credential refreshed",
                metadata: [
                    "user_identifier": "\(user)", "provider": "\(provider.name)", "rotated": "\(rotated)",
                    "expires_in": "\(DurationFormat.humanReadable(entry.deadline - received))", "credential_state": "valid",
                ])
            return .refreshed(entry)
        case .permanent(let error, let description):
            // The server's free text may quote the tokens it refused: never pass them on.
            let reason = SecretRedaction.redact(
                description.map { "\(error): \($0)" } ?? error,
                secrets: [credential.accessToken.value] + (credential.refreshToken.map { [$0.value] } ?? [])
            )
            return .failed(await markReauthenticationRequired(credential, reason: reason))
        case .transient(let reason, let retryAfter):
            return await recordTransientFailure(
                credential, provider: provider, reason: reason, retryAfter: retryAfter, unresolvedBefore: unresolvedBefore)
        case .unanswered(let reason):
            return await recordTransientFailure(credential, provider: provider, reason: reason, retryAfter: nil, unanswered: true)
        }
    }

    /// Records a failed grant and plans its retry. `unanswered`: the request may have reached
    /// the provider (``GrantOutcome/unanswered(reason:)``); then, or while an earlier grant's
    /// outcome is unknown (`unresolvedBefore`), the grant's marker stays: the retry runs as a
    /// recovery, and a restart before it recovers at once — as after a crash.
    func recordTransientFailure(
        _ credential: Credential, provider: ProviderConfiguration, reason: String, retryAfter: Duration?,
        unanswered: Bool = false, unresolvedBefore: Bool = false
    ) async -> GrantResult {
        let user = credential.userIdentifier
        let attempts = grants.nextAttempt(of: user)
        grants.failures[user] = attempts
        let retryAt = now() + retryDelay(attempt: attempts, retryAfter: retryAfter)
        var updated = credential
        updated.status.state = .retrying
        updated.status.lastError = reason
        if !unanswered, !unresolvedBefore { updated.status.grantStartedAt = nil }
        updated.status.retryAt = retryAt
        await writeStatus(&updated)
        updateView(updated, provider: provider)
        logger.warning(
            "refresh failed; will retry",
            metadata: [
                "user_identifier": "\(user)", "provider": "\(provider.name)", "problem": "\(reason)", "attempt": "\(attempts)",
                "retry_in": "\(DurationFormat.humanReadable(retryAt - now()))", "credential_state": "retrying",
                "grant_outcome": unanswered ? "unknown" : "failed",
            ])
        return .failed(.refreshFailed(user, reason: reason, retryAt: retryAt.secondsSince1970))
    }

    /// Moves a credential to *reauthentication required*: no more refreshes, no more serving.
    func markReauthenticationRequired(_ credential: Credential, reason: String) async -> VarlinkError {
        var updated = credential
        updated.status.state = .reauthenticationRequired
        updated.status.lastError = reason
        updated.status.grantStartedAt = nil
        updated.status.retryAt = nil
        await writeStatus(&updated)
        let providers = settings.current.providers
        if let provider = providers[credential.provider] {
            updateView(updated, provider: provider)
        } else {
            view.store(entry(for: updated, providers: providers))
        }
        scheduler.cancel(credential.userIdentifier)
        grants.failures[credential.userIdentifier] = nil
        logger.warning(
            "reauthentication required",
            metadata: [
                "user_identifier": "\(credential.userIdentifier)", "provider": "\(credential.provider)", "reason": "\(reason)",
                "credential_state": "reauthentication_required",
            ])
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
    func updateView(_ credential: Credential, provider: ProviderConfiguration) -> ViewEntry {
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
    var grantsInFlight: [Task<GrantResult, Never>] { Array(grants.inFlight.values) + Array(grants.narrowedInFlight.values) }

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

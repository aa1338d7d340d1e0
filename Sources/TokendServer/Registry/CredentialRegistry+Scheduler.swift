import TokendConfig
import TokendCore

/// The scheduler: plans each credential's next event with
/// ``RefreshPolicy/events(status:renewable:times:jitter:now:)``, keeps them in
/// ``RefreshScheduler``, and runs the loop that starts what is due.
extension CredentialRegistry {
    /// Plans the next event for a credential: a proactive refresh at its refresh point, a retry
    /// after a failure, or — when the login's absolute end comes first — the end itself, plus a
    /// warning ahead of that end.
    func plan(_ credential: Credential, providers: [String: ProviderConfiguration]) {
        planEvents(
            user: credential.userIdentifier, provider: credential.provider, status: credential.status,
            hasRefreshToken: credential.refreshToken != nil, times: CredentialTimes(of: credential), providers: providers
        )
    }

    func plan(_ entry: ViewEntry, providers: [String: ProviderConfiguration]) {
        planEvents(
            user: entry.userIdentifier, provider: entry.provider, status: entry.status, hasRefreshToken: entry.hasRefreshToken,
            times: CredentialTimes(issuedAt: entry.issuedAt, expiresAt: entry.expiresAt, sessionStartedAt: entry.sessionStartedAt),
            providers: providers
        )
    }

    private func planEvents(
        user: String, provider providerName: String, status: RefreshStatus, hasRefreshToken: Bool, times: CredentialTimes,
        providers: [String: ProviderConfiguration]
    ) {
        guard let provider = providers[providerName] else {
            scheduler.cancel(user)
            return
        }
        var events = Self.plannedEvents(status: status, hasRefreshToken: hasRefreshToken, times: times, provider: provider, now: now())
        if let plan = events.plan, plan.shorterThanMargin { notices.shortLivedTokens(provider: provider, lifetime: plan.lifetime) }
        let awaitingGrant = status.state == .refreshing && grants.grantInFlight(of: user) != nil
        // Another node's grant is in flight: nothing but a check when its lease ends. (Without
        // a lease known elsewhere the grant may be this node's own narrowed grant: planned as usual.)
        if status.state == .refreshing, !awaitingGrant, events.due != nil, let lease = gate.takeOver?.leaseElsewhere(of: user) {
            events.due = TakeOverCheck.checkTime(lease)
        }
        if let due = scheduler.replan(user, with: events, awaitingGrant: awaitingGrant), wakeup.isNeeded(for: due) { wake() }
        if !provider.relogin.thresholds.isEmpty { scheduleReloginCheck(user) }
    }

    /// Plans a refresh of `user` after `delay`, whatever its times say (a grant that could not
    /// be recorded or committed, a store that cannot be reached).
    func planRetry(_ user: String, after delay: Duration) {
        let due = now() + delay
        scheduler.retry(user, at: due)
        if wakeup.isNeeded(for: due) { wake() }
    }

    /// The next event of one credential, with this daemon's jitter: pure, so start-up can plan
    /// a million credentials in parallel and insert them into the schedule at once.
    nonisolated static func plannedEvents(
        status: RefreshStatus, hasRefreshToken: Bool, times: CredentialTimes, provider: ProviderConfiguration, now: Timestamp,
        jitter: Double = JitterSource.next()
    ) -> PlannedEvents {
        provider.refreshPolicy.events(
            status: status, renewable: hasRefreshToken || !isOAuth(provider), times: times, jitter: jitter, now: now)
    }

    /// Whether `entry`'s token is due on some node: the earliest refresh point any node's
    /// jitter can give it (jitter 1) has come. A credential whose event comes from its own plan
    /// always is; one checked because another node took its lease is, if that node took it to
    /// refresh a due token (``TakeOverCheck``), and is not once that node's result has replaced it.
    nonisolated static func isDueForAnyNode(_ entry: ViewEntry, provider: ProviderConfiguration, now: Timestamp) -> Bool {
        let times = CredentialTimes(issuedAt: entry.issuedAt, expiresAt: entry.expiresAt, sessionStartedAt: entry.sessionStartedAt)
        let events = plannedEvents(
            status: entry.status, hasRefreshToken: entry.hasRefreshToken, times: times, provider: provider, now: now, jitter: 1)
        guard let due = events.due else { return false }
        return due <= now
    }

    private nonisolated static func isOAuth(_ provider: ProviderConfiguration) -> Bool {
        if case .oauth2 = provider.kind { return true }
        return false
    }

    // MARK: The loop

    /// Runs scheduled refreshes until cancelled. Sleeps until the earliest due time; nothing runs
    /// while nothing is due (no polling, no per-second ticks).
    func runScheduler() async {
        while !Task.isCancelled {
            let current = now()
            for user in scheduler.popWarnings(now: current) { warnAboutSessionEnd(user, now: current) }
            for user in reloginChecks.popDue(now: current, limit: 4096) { checkRelogin(user, now: current) }
            let due = scheduler.popDue(now: current, limit: 4096)
            for user in due { startScheduledEvent(user, now: current) }
            if due.count == 4096 {
                await Task.yield()
                continue
            }
            let next = [scheduler.nextEvent, reloginChecks.nextDue].compactMap { $0 }.min()
            await sleep(until: next)
        }
        wake()
    }

    private func startScheduledEvent(_ user: String, now current: Timestamp) {
        guard let entry = view[user], let provider = settings.current.providers[entry.provider] else { return }
        if let end = entry.sessionEndsAt, current >= end {
            Task {
                await self.lock(user)
                defer { Task { await self.unlock(user) } }
                if let stored = try? await self.store.load(userIdentifier: user) {
                    _ = await self.markReauthenticationRequired(stored, reason: self.sessionEndedReason(provider))
                }
            }
            return
        }
        let marked = entry.status.grantStartedAt != nil || entry.status.state == .refreshing
        if grants.grantInFlight(of: user) == nil, let takeOver = gate.takeOver {
            switch takeOver.step(of: user, now: current) {
            case .checkAgain(let at):
                scheduler.retry(user, at: at)
                return
            case .takeOver:
                if !marked, !Self.isDueForAnyNode(entry, provider: provider, now: current) {
                    plan(entry, providers: settings.current.providers)
                    return
                }
            }
        }
        startGrant(user, reason: marked ? .recovery : .proactive)
    }

    private func warnAboutSessionEnd(_ user: String, now current: Timestamp) {
        guard let entry = view[user], let end = entry.sessionEndsAt, end > current else { return }
        logger.warning(
            "login ends soon; reauthenticate before then",
            metadata: [
                "user_identifier": "\(user)", "provider": "\(entry.provider)",
                "ends_in": "\(DurationFormat.humanReadable(end - current))", "ends_at": "\(end.secondsSince1970)",
            ])
    }

    /// Waits until `target` (wall clock) or until `wake()` — a new earlier plan, a wall-clock
    /// step, or cancellation. Sleeps are capped at ten minutes so a missed clock event costs at
    /// most that, not a missed refresh.
    private func sleep(until target: Timestamp?) async {
        let cap = now() + .seconds(600)
        let until = min(target ?? cap, cap)
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                if Task.isCancelled {
                    continuation.resume()
                    return
                }
                let delay = until - now()
                let timer = Task { [weak self] in
                    if delay > .zero { try? await Task.sleep(for: delay) }
                    guard !Task.isCancelled else { return }
                    await self?.wake()
                }
                wakeup.sleep(continuation, until: until, timer: timer)
            }
        } onCancel: {
            Task { await self.wake() }
        }
    }

    /// Ends the scheduler's current sleep so it re-reads the plan and the clock.
    func wake() { wakeup.fire() }
}

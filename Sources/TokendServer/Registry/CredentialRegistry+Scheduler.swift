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
        let events = Self.plannedEvents(status: status, hasRefreshToken: hasRefreshToken, times: times, provider: provider, now: now())
        if let plan = events.plan, plan.shorterThanMargin { notices.shortLivedTokens(provider: provider, lifetime: plan.lifetime) }
        let awaitingGrant = status.state == .refreshing && grants.grantInFlight(of: user) != nil
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
        status: RefreshStatus, hasRefreshToken: Bool, times: CredentialTimes, provider: ProviderConfiguration, now: Timestamp
    ) -> PlannedEvents {
        provider.refreshPolicy.events(
            status: status, renewable: hasRefreshToken || !isOAuth(provider), times: times, jitter: JitterSource.next(), now: now)
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
        let reason: RefreshReason = (entry.status.grantStartedAt != nil || entry.status.state == .refreshing) ? .recovery : .proactive
        startGrant(user, reason: reason)
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

import TokendConfig
import TokendCore

extension CredentialRegistry {
    /// Plans the next event for a credential: a proactive refresh at its refresh point, a retry
    /// after a failure, or — when the login's absolute end comes first — the end itself, plus a
    /// warning ahead of that end.
    func plan(_ credential: Credential, providers: [String: ProviderConfiguration]) {
        planEvents(
            user: credential.userIdentifier, provider: credential.provider, status: credential.status,
            hasRefreshToken: credential.refreshToken != nil,
            times: (credential.issuedAt, credential.expiresAt, credential.sessionStartedAt), providers: providers
        )
    }

    func plan(_ entry: ViewEntry, providers: [String: ProviderConfiguration]) {
        planEvents(
            user: entry.userIdentifier, provider: entry.provider, status: entry.status, hasRefreshToken: entry.hasRefreshToken,
            times: (entry.issuedAt, entry.expiresAt, entry.sessionStartedAt), providers: providers
        )
    }

    private func planEvents(
        user: String, provider providerName: String, status: RefreshStatus, hasRefreshToken: Bool,
        times: (issuedAt: Timestamp, expiresAt: Timestamp, sessionStartedAt: Timestamp), providers: [String: ProviderConfiguration]
    ) {
        schedule.cancel(user)
        warnings.cancel(user)
        guard let provider = providers[providerName] else { return }
        let events = Self.plannedEvents(status: status, hasRefreshToken: hasRefreshToken, times: times, provider: provider, now: now())
        if let plan = events.plan, plan.shorterThanMargin { noteShortLivedTokens(provider: provider, lifetime: plan.lifetime) }
        if let warnAt = events.warnAt { warnings.schedule(user, at: warnAt) }
        guard let due = events.due else { return }
        // A credential whose grant is in flight (marked `refreshing` by it) gets its next event
        // from the grant's outcome. Planned from its old times it would be due at once — and
        // every grant of a refresh storm would wake the scheduler and start a task only to
        // join the grant it is already part of.
        if status.state == .refreshing, inFlight[user] != nil { return }
        schedule.schedule(user, at: due)
        if let target = sleepTarget, due < target { wake() } else if sleepTarget == nil, sleeper != nil { wake() }
    }

    /// Plans a refresh of `user` after `delay`, whatever its times say (a grant that could not
    /// be recorded or committed).
    func planRetry(_ user: String, after delay: Duration) {
        let due = now() + delay
        schedule.schedule(user, at: due)
        if let target = sleepTarget, due < target { wake() } else if sleepTarget == nil, sleeper != nil { wake() }
    }

    /// The next refresh (or end of login) and the session-end warning of one credential: pure,
    /// so start-up can plan a million credentials and insert them into the schedule at once.
    nonisolated static func plannedEvents(
        status: RefreshStatus, hasRefreshToken: Bool,
        times: (issuedAt: Timestamp, expiresAt: Timestamp, sessionStartedAt: Timestamp), provider: ProviderConfiguration, now: Timestamp
    ) -> (due: Timestamp?, warnAt: Timestamp?, plan: RefreshPlan?) {
        guard status.state != .reauthenticationRequired else { return (nil, nil, nil) }
        let policy = provider.refreshPolicy
        let shape = Credential(
            userIdentifier: "", provider: provider.name, accessToken: SecretString(""), refreshToken: nil, tokenType: "",
            scope: nil, expiresAt: times.expiresAt, issuedAt: times.issuedAt, sessionStartedAt: times.sessionStartedAt,
            readers: [], enrolment: Enrolment(uid: 0, pid: 0, at: times.issuedAt)
        )
        let deadline = policy.deadline(of: shape)
        let sessionEnd = policy.sessionEnd(of: shape)
        var warnAt: Timestamp?
        if let sessionEnd {
            let lead = sessionEnd - policy.sessionWarningLead
            if lead > now { warnAt = lead } else if sessionEnd > now { warnAt = now }
        }
        let plan = policy.plan(issuedAt: times.issuedAt, deadline: deadline, lastGrantAt: status.lastRefreshAt, jitter: JitterSource.next())
        let due: Timestamp
        if status.state == .retrying, let retryAt = status.retryAt {
            due = retryAt
        } else if let sessionEnd, deadline >= sessionEnd {
            // Refreshing cannot outlive the login: the next event is its end.
            due = sessionEnd
        } else if hasRefreshToken || !isOAuth(provider) {
            due = plan.refreshAt
        } else {
            return (nil, warnAt, plan)  // Nothing can renew it; it is served until its deadline.
        }
        return (due, warnAt, plan)
    }

    /// A provider's tokens live no longer than its `refresh_margin`: said once per provider
    /// in the journal (the margin is shortened to a third of the lifetime, see
    /// ``RefreshPolicy/plan(issuedAt:deadline:lastGrantAt:jitter:)``); per credential, status
    /// and metrics show it (``ViewEntry/shorterThanMargin``).
    func noteShortLivedTokens(provider: ProviderConfiguration, lifetime: Duration) {
        guard shortLivedProviders.insert(provider.name).inserted else { return }
        logger.warning(
            "tokens live no longer than refresh_margin; refreshing at two thirds of their lifetime instead",
            metadata: [
                "provider": "\(provider.name)", "token_lifetime": "\(DurationFormat.humanReadable(lifetime))",
                "refresh_margin": "\(DurationFormat.humanReadable(provider.refreshPolicy.minimumMargin))",
            ])
    }

    /// A provider's answer did not say when its token expires: said once per provider, with
    /// the lifetime used instead (`assumed_lifetime`).
    func noteAssumedLifetime(provider: ProviderConfiguration, reason: String) {
        guard assumedLifetimeProviders.insert(provider.name).inserted else { return }
        logger.warning(
            "token lifetime unknown; assuming assumed_lifetime",
            metadata: [
                "provider": "\(provider.name)", "problem": "\(reason)",
                "assumed_lifetime": "\(DurationFormat.humanReadable(provider.refreshPolicy.assumedLifetime))",
            ])
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
            for user in warnings.popDue(now: current) { warnAboutSessionEnd(user, now: current) }
            let due = schedule.popDue(now: current, limit: 4096)
            for user in due { startScheduledEvent(user, now: current) }
            if due.count == 4096 {
                await Task.yield()
                continue
            }
            let next = [schedule.nextDue, warnings.nextDue].compactMap { $0 }.min()
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
                sleeper = continuation
                sleepTarget = until
                let delay = until - now()
                sleepTimer = Task { [weak self] in
                    if delay > .zero { try? await Task.sleep(for: delay) }
                    guard !Task.isCancelled else { return }
                    await self?.wake()
                }
            }
        } onCancel: {
            Task { await self.wake() }
        }
    }

    /// Ends the scheduler's current sleep so it re-reads the plan and the clock.
    func wake() {
        sleepTimer?.cancel()
        sleepTimer = nil
        sleepTarget = nil
        if let sleeper {
            self.sleeper = nil
            sleeper.resume()
        }
    }
}

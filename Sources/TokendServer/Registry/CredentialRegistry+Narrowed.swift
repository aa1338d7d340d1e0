import Logging
import TokendConfig
import TokendCore
import TokendProtocol
import TokendStorage

/// Tokens narrowed to a scope or resource (`ProvideTokenReplacement` with `scope`/`resource`).
///
/// A narrowed token is got with the credential's refresh token, so its grant is one of the
/// credential's grants: it waits for the credential's other grants (``lockRefreshToken(_:)``),
/// takes a grant slot, marks the credential durably while its request is out, takes the refresh
/// lease of a shared store, and commits the rotated refresh token to the credential together
/// with the narrowed token, in one write. Callers asking for the same narrowing share one grant.
extension CredentialRegistry {
    /// A narrowed token for `narrowing` of `user` that stays valid for `minimumValidity` and is
    /// not `rejectedToken`: the one kept, or a new one from the provider.
    ///
    /// - Throws: `InvalidCredential` when the provider does not hand out narrowed tokens, the
    ///   credential is DPoP-bound, or the scope asked for is not within the credential's;
    ///   `RefreshFailed` when the provider refuses, answers with a wider token, or cannot be
    ///   reached (the credential's own token is unaffected).
    func narrowedToken(
        for user: String, narrowing: TokenNarrowing, minimumValidity: Duration, rejectedToken: String?
    ) async throws(VarlinkError) -> NarrowedServing {
        guard let entry = view[user] else { throw .unknownUser(user) }
        if entry.status.state == .reauthenticationRequired {
            throw .reauthenticationRequired(user, reason: entry.status.lastError ?? "the login has ended")
        }
        guard let provider = settings.current.providers[entry.provider] else {
            throw .refreshFailed(user, reason: "provider \(entry.provider) is not configured", retryAt: nil)
        }
        if let refusal = narrowingRefusal(entry, provider: provider, narrowing: narrowing) { throw .invalidCredential(refusal) }
        if let current = view.narrowedTokens.lookup(user, key: narrowing.key, enrolment: entry.enrolment),
            current.serves(now: now(), minimumValidity: minimumValidity, rejectedToken: rejectedToken)
        {
            return current
        }
        let flight = "\(user)\u{0}\(narrowing.key)"
        var result: GrantResult = .failed(.refreshFailed(user, reason: "no narrowed token", retryAt: nil))
        // A flight started by another caller answers its own question (its `rejectedToken`): when
        // its token is the one this caller reports refused, or is no longer valid, this caller
        // runs a flight of its own, once.
        for attempt in 0..<2 {
            let task: Task<GrantResult, Never>
            var joined = false
            if attempt == 0, let running = grants.narrowedGrantInFlight(flight) {
                (task, joined) = (running, true)
            } else {
                task = Task {
                    await self.obtainNarrowed(user, narrowing: narrowing, minimumValidity: minimumValidity, rejectedToken: rejectedToken)
                }
                grants.startNarrowedFlight(task, flight)
            }
            result = await task.value
            grants.endNarrowedFlight(task, flight)
            guard joined, case .narrowed(let serving) = result,
                !serving.stillServes(now: now(), minimumValidity: .zero, rejectedToken: rejectedToken)
            else { break }
        }
        switch result {
        // Like the credential's own token: the newest token is the answer, even when the
        // provider's tokens live less long than `minimumValidity` asks.
        case .narrowed(let serving): return serving
        case .failed(let error): throw error
        case .refreshed: throw .refreshFailed(user, reason: "internal error: a refresh answered a narrowed grant", retryAt: nil)
        }
    }

    /// Why `entry` cannot have a token narrowed to `narrowing`, or nil.
    func narrowingRefusal(_ entry: ViewEntry, provider: ProviderConfiguration, narrowing: TokenNarrowing) -> String? {
        narrowingRefusal(
            user: entry.userIdentifier, scope: entry.scope, dpopBound: entry.isDPoPBound, provider: provider, narrowing: narrowing)
    }

    /// The same for the stored credential a narrowed grant is about to spend: the login may have
    /// been replaced, or the provider reconfigured, while the grant waited for its turn.
    func narrowingRefusal(_ credential: Credential, provider: ProviderConfiguration, narrowing: TokenNarrowing) -> String? {
        narrowingRefusal(
            user: credential.userIdentifier, scope: credential.scope,
            dpopBound: credential.dpopKey != nil || credential.tokenType.lowercased() == "dpop", provider: provider, narrowing: narrowing)
    }

    private func narrowingRefusal(
        user: String, scope: String?, dpopBound: Bool, provider: ProviderConfiguration, narrowing: TokenNarrowing
    ) -> String? {
        guard provider.allowsNarrowedTokens else {
            return
                "provider '\(provider.name)' does not hand out narrowed tokens; set narrowed_tokens = true in its section if it keeps a refresh token's scope on a grant that asks for less (RFC 6749 §6)"
        }
        if notices.narrowsRefreshTokens(provider) {
            return
                "provider '\(provider.name)' narrowed a credential's refresh token itself after a narrowed grant, so tokend no longer asks it for narrowed tokens (until a restart); ask for the credential's own token"
        }
        if dpopBound {
            return "the tokens of '\(user)' are DPoP-bound; narrowed tokens are available for bearer tokens only"
        }
        return NarrowingRules.refusal(of: narrowing, grantedScope: scope)
    }

    /// The single flight's work: under the refresh-token lock, the kept token if it serves
    /// (another flight or node may have got it meanwhile), else a grant.
    private func obtainNarrowed(
        _ user: String, narrowing: TokenNarrowing, minimumValidity: Duration, rejectedToken: String?
    ) async -> GrantResult {
        await lockRefreshToken(user)
        defer { unlockRefreshToken(user) }
        let stored: Credential
        do {
            guard let loaded = try await store.load(userIdentifier: user) else { return .failed(.unknownUser(user)) }
            stored = loaded
        } catch {
            logger.error("reading a credential for its narrowed token failed: \(error)", metadata: ["user_identifier": "\(user)"])
            return .failed(.storageFailed("the credential could not be read"))
        }
        // The login may have ended while this flight waited for the credential's other grant.
        if stored.status.state == .reauthenticationRequired {
            return .failed(.reauthenticationRequired(user, reason: stored.status.lastError ?? "the login has ended"))
        }
        guard let provider = settings.current.providers[stored.provider] else {
            return .failed(.refreshFailed(user, reason: "provider \(stored.provider) is not configured", retryAt: nil))
        }
        let policy = provider.refreshPolicy
        let kept = stored.narrowedToken(for: narrowing.key).map { NarrowedServing($0, of: stored, policy: policy) }
        let current = now()
        if let kept {
            view.narrowedTokens.keep(kept, for: user)
            if kept.serves(now: current, minimumValidity: minimumValidity, rejectedToken: rejectedToken) { return .narrowed(kept) }
        }
        // Callers asking for more validity than the provider gives, or reporting a token
        // refused over and over, get no more than one grant per `forced_refresh_interval`, as for
        // the credential's own token (``CallerRefreshRule``): the kept token while it is valid and
        // not refused, else a RefreshFailed saying when to try again.
        let interval = limits.forcedRefreshInterval
        switch NarrowedGrantLimit.decide(
            lastGrantOfRequest: grants.lastNarrowedGrant(of: user, key: narrowing.key),
            grantsOfCredential: grants.narrowedGrants(of: user), now: current, interval: interval)
        {
        case .grant:
            break
        case .sameRequestTooSoon(let nextAllowed):
            if let kept, kept.stillServes(now: current, minimumValidity: .zero, rejectedToken: rejectedToken) { return .narrowed(kept) }
            let lastOutcome = grants.lastNarrowedFailure(of: user, key: narrowing.key).map { " (the last attempt: \($0))" } ?? ""
            return .failed(
                .refreshFailed(
                    user,
                    reason:
                        "a token narrowed to \(narrowing) was asked of the provider less than \(DurationFormat.humanReadable(interval)) ago\(lastOutcome); another grant is allowed in \(DurationFormat.humanReadable(nextAllowed - current))",
                    retryAt: nextAllowed.secondsSince1970))
        case .credentialBudgetSpent(let nextAllowed):
            return .failed(
                .refreshFailed(
                    user,
                    reason:
                        "\(NarrowedToken.maxPerCredential) narrowed tokens of this credential were asked of the provider in the last \(DurationFormat.humanReadable(interval)); another grant is allowed in \(DurationFormat.humanReadable(nextAllowed - current))",
                    retryAt: nextAllowed.secondsSince1970))
        }
        let result = await narrowedGrant(user, narrowing: narrowing, minimumValidity: minimumValidity)
        if case .failed(let error) = result {
            grants.noteNarrowedFailure(of: user, key: narrowing.key, error.parameters["reason"]?.stringValue ?? error.name)
        } else {
            grants.noteNarrowedFailure(of: user, key: narrowing.key, nil)
        }
        // Only a failure to get a new token, for the same login, leaves the kept one served.
        if case .failed(let error) = result, error.name == TokendErrorName.refreshFailed.rawValue, let kept,
            view[user]?.enrolment == stored.enrolment,
            kept.stillServes(now: now(), minimumValidity: minimumValidity, rejectedToken: rejectedToken)
        {
            // Like the credential's own token: a failed replacement leaves a valid token served.
            logger.warning(
                "replacing a narrowed token failed; the current one is still valid and served",
                metadata: ["user_identifier": "\(user)", "narrowing": "\(narrowing)", "problem": "\(error)"])
            return .narrowed(kept)
        }
        return result
    }

    /// The grant itself, through the refresh gate. A shared store's gate may answer that another
    /// node refreshed the credential meanwhile: that is no narrowed token, so the gate is asked
    /// again (at most three times) with the refresh token that node left.
    private func narrowedGrant(_ user: String, narrowing: TokenNarrowing, minimumValidity: Duration) async -> GrantResult {
        let gate = self.gate
        for _ in 0..<3 {
            switch await gate.enter(user, registry: self) {
            case .granted(let lease):
                grants.noteNarrowedGrant(of: user, key: narrowing.key, at: now(), keepingAfter: now() - limits.forcedRefreshInterval)
                let result = await grant(user, reason: .tooShortLived(minimumValidity: minimumValidity), narrowing: narrowing)
                await gate.leave(lease, registry: self)
                return result
            case .settled(.failed(let error)):
                return .failed(error)
            case .settled:
                continue
            }
        }
        return .failed(.refreshFailed(user, reason: "other nodes kept refreshing the credential; try again", retryAt: nil))
    }

    /// Phase 3 of a narrowed grant (``GrantCommit/narrowed(_:of:narrowing:stateBefore:context:)``),
    /// carried out: the rotated refresh token (if any) and the narrowed token are written to the
    /// credential in one compare-and-swap; the credential's own token and refresh plan stay as
    /// they were.
    func commitNarrowed(
        _ outcome: GrantOutcome, for credential: Credential, narrowing: TokenNarrowing, provider: ProviderConfiguration,
        grouping: Duration, stateBefore: CredentialState?, unresolvedBefore: Bool
    ) async -> GrantResult {
        let context = commitContext(credential, provider: provider, unresolvedBefore: unresolvedBefore)
        let commit = GrantCommit.narrowed(outcome, of: credential, narrowing: narrowing, stateBefore: stateBefore, context: context)
        return await carryOut(commit, for: credential, provider: provider, grouping: grouping)
    }
}

extension GrantCommit {
    /// The commit of a narrowed grant's `outcome` for the stored `credential`, asked for
    /// `narrowing`; `stateBefore` is the credential's state before the grant marked it.
    ///
    /// The credential's own token and refresh plan stay as they were. An answer writes the
    /// rotated refresh token (if any) and the narrowed token together, in one write; an answer
    /// whose token does not fit the request keeps the rotated refresh token and is the callers'
    /// `RefreshFailed`. A refusal or a transient failure is the callers' error only: the
    /// refresh token was not spent, so the credential goes back to its state before the grant
    /// (its own next grant finds out whether its refresh token still works). An unanswered
    /// grant may have spent it: the credential recovers as after any unanswered grant.
    public static func narrowed(
        _ outcome: GrantOutcome, of credential: Credential, narrowing: TokenNarrowing, stateBefore: CredentialState?,
        context: GrantCommitContext
    ) -> GrantCommit {
        let user = credential.userIdentifier
        let received = context.received
        let policy = context.policy
        var restored = credential
        restored.status.state = stateBefore.flatMap { $0 == .refreshing ? nil : $0 } ?? .valid
        if !context.unresolvedBefore { restored.status.grantStartedAt = nil }
        switch outcome {
        case .success(let response):
            var next = restored
            // The provider answered: the refresh token it may have rotated is the credential's now.
            next.status.grantStartedAt = nil
            if let rotated = response.refreshToken { next.refreshToken = rotated }
            let rotated = response.refreshToken != nil
            var problem = NarrowingRules.problem(with: narrowing, responseScope: response.scope, accessToken: response.accessToken.value)
            var token: NarrowedToken?
            if problem == nil {
                do {
                    // Same checks and times as the credential's own token (subject, lifetime).
                    let shaped = try credential.refreshed(with: response, receivedAt: received, assumedLifetime: policy.assumedLifetime)
                    let candidate = NarrowedToken(
                        key: narrowing.key, scope: response.scope ?? narrowing.scope, resource: narrowing.resource,
                        accessToken: response.accessToken, tokenType: response.tokenType, issuedAt: shaped.issuedAt,
                        expiresAt: shaped.expiresAt, enrolledAt: credential.enrolment.at)
                    if deadline(of: candidate, in: credential, policy: policy) <= received {
                        problem =
                            "the provider answered with a narrowed token that had already expired (check the provider's and this host's clocks)"
                    } else {
                        token = candidate
                    }
                } catch {
                    problem = "the token endpoint's answer is unusable: \(error)"
                }
            }
            if let token { next.keep(token) }
            let actions: [GrantAction] = [.storeCredential(.narrowed), .publish]
            let metadata = ["user_identifier": user, "provider": context.provider, "narrowing": "\(narrowing)", "rotated": "\(rotated)"]
            guard let token, problem == nil else {
                let problem = problem ?? "no narrowed token"
                let line = GrantLog(.warning, "narrowed token refused", metadata.merging(["problem": problem]) { $1 })
                return GrantCommit(next: next, actions: actions + [.log(line)], reply: .refreshFailed(reason: problem, retryAt: nil))
            }
            let expiresIn = DurationFormat.humanReadable(deadline(of: token, in: next, policy: policy) - received)
            let line = GrantLog(.info, "narrowed token obtained", metadata.merging(["expires_in": expiresIn]) { $1 })
            return GrantCommit(next: next, actions: actions + [.serveNarrowed(token), .log(line)], reply: .narrowed(token))
        case .permanent(let error, let description):
            let reason = redactedRefusal(error, description, of: credential)
            return GrantCommit(
                next: restored,
                actions: restoredActions(
                    of: user, narrowing: narrowing, "narrowed token refused by the provider", reason, context: context),
                reply: .refreshFailed(reason: "the provider refused a token narrowed to \(narrowing): \(reason)", retryAt: nil))
        case .transient(let reason, let retryAfter):
            return GrantCommit(
                next: restored,
                actions: restoredActions(of: user, narrowing: narrowing, "narrowed grant failed", reason, context: context),
                reply: .refreshFailed(reason: reason, retryAt: retryAfter.map { received + $0 }))
        case .unanswered(let reason):
            return transientFailure(of: credential, reason: reason, retryAfter: nil, unanswered: true, context: context)
        }
    }

    /// A narrowed token's deadline, as served (``RefreshPolicy/deadline(expiresAt:issuedAt:sessionStartedAt:)``).
    static func deadline(of token: NarrowedToken, in credential: Credential, policy: RefreshPolicy) -> Timestamp {
        policy.deadline(expiresAt: token.expiresAt, issuedAt: token.issuedAt, sessionStartedAt: credential.sessionStartedAt)
    }

    /// A narrowed grant with a definite failure: the credential's state before it is written back.
    private static func restoredActions(
        of user: String, narrowing: TokenNarrowing, _ message: String, _ problem: String, context: GrantCommitContext
    ) -> [GrantAction] {
        let line = GrantLog(
            .warning, message, ["user_identifier": user, "provider": context.provider, "narrowing": "\(narrowing)", "problem": problem])
        return [.storeStatus, .publish, .log(line)]
    }
}

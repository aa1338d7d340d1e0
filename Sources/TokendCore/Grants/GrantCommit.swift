/// What committing a grant's outcome does to a credential: the next credential and the
/// daemon's actions, in order. Pure: the registry carries the actions out
/// (``GrantAction``), stopping at a store write that fails.
public struct GrantCommit: Sendable, Hashable {
    /// The credential to store and publish.
    public var next: Credential
    /// What to do, in order.
    public var actions: [GrantAction]
    /// The answer to the callers waiting for the grant, once the actions are done.
    public var reply: GrantReply

    public init(next: Credential, actions: [GrantAction], reply: GrantReply) {
        self.next = next
        self.actions = actions
        self.reply = reply
    }
}

/// One step of committing a grant (``GrantCommit``).
public enum GrantAction: Sendable, Hashable {
    /// The provider narrowed the credential's refresh token after narrowed grants: say so (once
    /// per provider) and ask it for no narrowed token any more.
    case noteRefreshTokenNarrowed(lost: [String])
    /// No narrowed token of any credential is answered from memory any more.
    case dropServedNarrowedTokens
    /// The provider's answer did not say when its token expires: say so (once per provider).
    case noteAssumedLifetime(reason: String)
    /// Write ``GrantCommit/next`` whole, compared and swapped against the generation the grant
    /// read. When the write fails, nothing after it happens: the registry answers as `kind`'s
    /// grant does for a credential changed meanwhile or a store that failed.
    case storeCredential(GrantKind)
    /// Write ``GrantCommit/next``'s status (a failure is logged; the rest goes on).
    case storeStatus
    /// The credential's failed grants in a row are now this many (nil: none).
    case setFailures(Int?)
    /// Publish ``GrantCommit/next`` to the view and plan its next refresh.
    case publish
    /// Publish ``GrantCommit/next``, whose login has ended, even when its provider is no longer
    /// configured.
    case publishEnded
    /// No refresh of the credential is planned any more.
    case cancelRefresh
    /// Serve the narrowed token from memory (kept in ``GrantCommit/next``).
    case serveNarrowed(NarrowedToken)
    /// A journal line.
    case log(GrantLog)
}

/// Which grant is committed: the store failures of ``GrantAction/storeCredential(_:)`` are
/// answered differently.
public enum GrantKind: Sendable, Hashable {
    /// The credential's own refresh: a credential changed meanwhile is answered with its
    /// current entry.
    case refresh
    /// A narrowed grant: a credential changed meanwhile is the caller's `RefreshFailed`.
    case narrowed
}

/// The answer to a committed grant's callers.
public enum GrantReply: Sendable, Hashable {
    /// The credential as published.
    case entry
    /// The narrowed token, as kept in the credential.
    case narrowed(NarrowedToken)
    /// `RefreshFailed` with this token-free reason.
    case refreshFailed(reason: String, retryAt: Timestamp?)
    /// `ReauthenticationRequired` with this token-free reason.
    case reauthenticationRequired(reason: String)
}

/// A journal line of a grant's commit; its text and metadata hold no token.
public struct GrantLog: Sendable, Hashable {
    public enum Level: Sendable, Hashable {
        case info
        case warning
    }

    public var level: Level
    public var message: String
    public var metadata: [String: String]

    public init(_ level: Level, _ message: String, _ metadata: [String: String]) {
        self.level = level
        self.message = message
        self.metadata = metadata
    }
}

/// What a commit needs besides the credential and the outcome.
public struct GrantCommitContext: Sendable, Hashable {
    /// The provider's name, for the journal.
    public var provider: String
    /// The provider's refresh policy: lifetimes, freshness, deadlines.
    public var policy: RefreshPolicy
    /// When the answer was received.
    public var received: Timestamp
    /// The attempt a failure now would be (failed grants in a row, plus one).
    public var attempt: Int
    /// The retry delays after failures.
    public var backoff: Backoff
    /// A number in `0..<1` for the backoff's jitter.
    public var random: Double
    /// An earlier grant's outcome is still unknown: a definite failure, which says nothing about
    /// that grant's refresh token, keeps the credential marked.
    public var unresolvedBefore: Bool

    public init(
        provider: String, policy: RefreshPolicy, received: Timestamp, attempt: Int, backoff: Backoff, random: Double,
        unresolvedBefore: Bool
    ) {
        self.provider = provider
        self.policy = policy
        self.received = received
        self.attempt = attempt
        self.backoff = backoff
        self.random = random
        self.unresolvedBefore = unresolvedBefore
    }

    /// The retry delay of this attempt, honouring a provider's `Retry-After`.
    func retryDelay(retryAfter: Duration? = nil) -> Duration {
        backoff.delay(attempt: attempt, retryAfter: retryAfter, random: random)
    }
}

extension GrantCommit {
    /// The commit of a refresh grant's `outcome` for the stored `credential`.
    ///
    /// - Success: the new tokens (a rotated refresh token too), stored before anyone is told. A
    ///   token no fresher than the one it replaces is kept but counts as a failure (the next
    ///   grant waits a backoff); one already expired keeps the current access token and is the
    ///   callers' `RefreshFailed`. Less scope after narrowed grants means the provider narrowed
    ///   the refresh token: the narrowed tokens go.
    /// - Permanent: reauthentication required, the provider's text redacted of the tokens.
    /// - Transient, unanswered, unusable answer: ``transientFailure(of:reason:retryAfter:unanswered:context:)``.
    public static func refresh(_ outcome: GrantOutcome, of credential: Credential, context: GrantCommitContext) -> GrantCommit {
        let user = credential.userIdentifier
        let received = context.received
        let policy = context.policy
        switch outcome {
        case .success(let response):
            var next: Credential
            do {
                next = try credential.refreshed(with: response, receivedAt: received, assumedLifetime: policy.assumedLifetime)
            } catch {
                // The provider issued tokens (and may have rotated the refresh token): unknown.
                return transientFailure(
                    of: credential, reason: "the token endpoint's answer is unusable: \(error)", retryAfter: nil, unanswered: true,
                    context: context)
            }
            var actions: [GrantAction] = []
            let rotated = response.refreshToken != nil
            // After narrowed grants, less scope than before means the provider narrowed the
            // refresh token itself (``NarrowingRules/scopeLost(before:after:)``). Such a provider
            // also treats the narrowed tokens as the refresh token's: they go, and no narrowed
            // token of any credential is answered from memory any more (the next requests reach
            // the registry, which refuses this provider's).
            if !credential.narrowedTokens.isEmpty, let lost = NarrowingRules.scopeLost(before: credential.scope, after: response.scope) {
                actions += [.noteRefreshTokenNarrowed(lost: lost), .dropServedNarrowedTokens]
                next.narrowedTokens = []
            }
            if let reason = response.lifetime(receivedAt: received, assumed: policy.assumedLifetime).assumedBecause {
                actions.append(.noteAssumedLifetime(reason: reason))
            }
            let freshness = policy.freshness(of: next, replacing: credential, receivedAt: received)
            let staleness: String
            switch freshness {
            case .fresher:
                actions += [.storeCredential(.refresh), .setFailures(nil), .publish]
                actions.append(
                    .log(
                        GrantLog(
                            .info, "credential refreshed",
                            [
                                "user_identifier": user, "provider": context.provider, "rotated": "\(rotated)",
                                "expires_in": DurationFormat.humanReadable(policy.deadline(of: next) - received),
                                "credential_state": "valid",
                            ])))
                return GrantCommit(next: next, actions: actions, reply: .entry)
            case .noFresher(let deadline):
                staleness =
                    "the provider answered with a token no fresher than the one it replaces (it expires in \(DurationFormat.humanReadable(deadline - received)))"
            case .expiredOnArrival:
                staleness = "the provider answered with a token that had already expired (check the provider's and this host's clocks)"
                // Nothing to serve in it: the current token stays (it may still be valid), the
                // new refresh token is kept.
                next.accessToken = credential.accessToken
                (next.tokenType, next.scope) = (credential.tokenType, credential.scope)
                (next.issuedAt, next.expiresAt) = (credential.issuedAt, credential.expiresAt)
            }
            // Kept (the refresh token may have rotated) but not a refresh: the next grant waits a backoff.
            let retryAt = received + context.retryDelay()
            next.status.state = .retrying
            next.status.lastError = staleness
            next.status.retryAt = retryAt
            actions += [.storeCredential(.refresh), .setFailures(context.attempt), .publish]
            actions.append(
                .log(
                    GrantLog(
                        .warning, "refresh brought no fresher token; will retry",
                        [
                            "user_identifier": user, "provider": context.provider, "problem": staleness, "attempt": "\(context.attempt)",
                            "retry_in": DurationFormat.humanReadable(retryAt - received), "credential_state": "retrying",
                            "rotated": "\(rotated)",
                        ])))
            let reply: GrantReply = freshness == .expiredOnArrival ? .refreshFailed(reason: staleness, retryAt: retryAt) : .entry
            return GrantCommit(next: next, actions: actions, reply: reply)
        case .permanent(let error, let description):
            return reauthenticationRequired(of: credential, reason: redactedRefusal(error, description, of: credential))
        case .transient(let reason, let retryAfter):
            return transientFailure(of: credential, reason: reason, retryAfter: retryAfter, unanswered: false, context: context)
        case .unanswered(let reason):
            return transientFailure(of: credential, reason: reason, retryAfter: nil, unanswered: true, context: context)
        }
    }

    /// A failed grant, retried after a backoff. `unanswered`: the request may have reached the
    /// provider (``GrantOutcome/unanswered(reason:)``); then, or while an earlier grant's
    /// outcome is unknown (``GrantCommitContext/unresolvedBefore``), the grant's marker stays:
    /// the retry runs as a recovery, and a restart before it recovers at once — as after a crash.
    public static func transientFailure(
        of credential: Credential, reason: String, retryAfter: Duration?, unanswered: Bool, context: GrantCommitContext
    ) -> GrantCommit {
        let retryAt = context.received + context.retryDelay(retryAfter: retryAfter)
        var next = credential
        next.status.state = .retrying
        next.status.lastError = reason
        if !unanswered, !context.unresolvedBefore { next.status.grantStartedAt = nil }
        next.status.retryAt = retryAt
        let line = GrantLog(
            .warning, "refresh failed; will retry",
            [
                "user_identifier": credential.userIdentifier, "provider": context.provider, "problem": reason,
                "attempt": "\(context.attempt)", "retry_in": DurationFormat.humanReadable(retryAt - context.received),
                "credential_state": "retrying", "grant_outcome": unanswered ? "unknown" : "failed",
            ])
        return GrantCommit(
            next: next, actions: [.setFailures(context.attempt), .storeStatus, .publish, .log(line)],
            reply: .refreshFailed(reason: reason, retryAt: retryAt))
    }

    /// The credential's login has ended (`reason`, token-free): no more refreshes, no more serving.
    public static func reauthenticationRequired(of credential: Credential, reason: String) -> GrantCommit {
        var next = credential
        next.status.state = .reauthenticationRequired
        next.status.lastError = reason
        next.status.grantStartedAt = nil
        next.status.retryAt = nil
        let line = GrantLog(
            .warning, "reauthentication required",
            [
                "user_identifier": credential.userIdentifier, "provider": credential.provider, "reason": reason,
                "credential_state": "reauthentication_required",
            ])
        return GrantCommit(
            next: next, actions: [.storeStatus, .publishEnded, .cancelRefresh, .setFailures(nil), .log(line)],
            reply: .reauthenticationRequired(reason: reason))
    }

    /// A provider's refusal as told on: its free text may quote the tokens it refused, which
    /// never pass on.
    static func redactedRefusal(_ error: String, _ description: String?, of credential: Credential) -> String {
        SecretRedaction.redact(
            description.map { "\(error): \($0)" } ?? error,
            secrets: [credential.accessToken.value] + (credential.refreshToken.map { [$0.value] } ?? []))
    }
}

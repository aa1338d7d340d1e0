import Synchronization
import TokendCore
import TokendOAuth
import TokendProtocol

/// A narrowed token as the event loops serve it: its deadline and refresh point worked out by
/// its provider's policy, like the credential's own token's, and its reply encoded once.
final class NarrowedServing: Sendable {
    let token: NarrowedToken
    /// The earliest of its `exp`, its `iat` plus `max_token_age`, and the login's end: a
    /// narrowed token never outlives the login it comes from.
    let deadline: Timestamp
    /// When a caller's request gets it replaced: the point the credential's own token of the
    /// same age would be refreshed at (without jitter). Narrowed tokens are replaced when asked
    /// for, not by the scheduler: nobody may ask for that scope again.
    let refreshAt: Timestamp
    /// The login it belongs to: a new enrolment of the user identifier makes it unusable.
    let enrolment: Enrolment
    let replyBytes: [UInt8]
    /// What the audit trail records of the token.
    let fingerprint: TokenFingerprint

    init(_ token: NarrowedToken, of credential: Credential, policy: RefreshPolicy) {
        self.token = token
        fingerprint = TokenFingerprint(of: token.accessToken.value)
        deadline = policy.deadline(expiresAt: token.expiresAt, issuedAt: token.issuedAt, sessionStartedAt: credential.sessionStartedAt)
        refreshAt = policy.plan(issuedAt: token.issuedAt, deadline: deadline, lastGrantAt: nil, jitter: 0).refreshAt
        enrolment = credential.enrolment
        let wire = Credentials(
            userIdentifier: credential.userIdentifier, accessToken: token.accessToken.value, tokenType: token.tokenType,
            expiresAt: deadline.secondsSince1970, issuedAt: token.issuedAt.secondsSince1970, scope: token.scope)
        var bytes: [UInt8] = []
        VarlinkReply(parameters: ["credentials": .object(wire.json)]).encode(into: &bytes)
        replyBytes = bytes
    }

    /// Whether it answers a caller now without a grant: before its refresh point, valid for
    /// `minimumValidity`, and not the token the caller says an API refused.
    func serves(now: Timestamp, minimumValidity: Duration, rejectedToken: String?) -> Bool {
        now < refreshAt && stillServes(now: now, minimumValidity: minimumValidity, rejectedToken: rejectedToken)
    }

    /// Whether it may still be served when a grant to replace it failed: valid for
    /// `minimumValidity` and not refused by an API.
    func stillServes(now: Timestamp, minimumValidity: Duration, rejectedToken: String?) -> Bool {
        if let rejectedToken, ConstantTime.equal(rejectedToken, token.accessToken.value) { return false }
        return ServeDecision.decide(deadline: deadline, now: now, minimumValidity: minimumValidity) == .serve
    }
}

/// The narrowed tokens programs asked for, by credential and request (``TokenNarrowing/key``):
/// a cached one is served on the event loop. Filled by the registry from the store; dropped
/// with the credential's entry (removal, new login, reload).
final class NarrowedTokenCache: Sendable {
    private let entries = Mutex<[String: [String: NarrowedServing]]>([:])

    /// The cached token for `key` of `user`'s login `enrolment`, if any.
    func lookup(_ user: String, key: String, enrolment: Enrolment) -> NarrowedServing? {
        guard let serving = entries.withLock({ $0[user]?[key] }), serving.enrolment == enrolment else { return nil }
        return serving
    }

    /// Keeps `serving` for `user`, at most ``NarrowedToken/maxPerCredential`` per credential
    /// (the one with the earliest deadline goes first).
    func keep(_ serving: NarrowedServing, for user: String) {
        entries.withLock { all in
            var mine = all[user] ?? [:]
            mine[serving.token.key] = serving
            if mine.count > NarrowedToken.maxPerCredential, let first = mine.min(by: { $0.value.deadline < $1.value.deadline }) {
                mine.removeValue(forKey: first.key)
            }
            all[user] = mine
        }
    }

    func forget(_ user: String) { entries.withLock { _ = $0.removeValue(forKey: user) } }

    func removeAll() { entries.withLock { $0.removeAll() } }
}

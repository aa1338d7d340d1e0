import Synchronization
import TokendCore
import TokendJSON
import TokendOAuth
import TokendProtocol
import TokendStorage

/// What the event loops need to answer `ProvideTokenReplacement` for one user without touching
/// the store: the token, its deadline, who may read it, and the reply, encoded once.
///
/// Immutable: a refresh replaces the entry as a whole, so a reader never sees half an update.
/// Entries loaded at start-up do not hold their access token: it is read from the store and
/// opened when first asked for (``DeferredAccessToken``, about 20 µs), and only the encoded
/// reply is kept, so a million credentials are ready in seconds and hold one copy of each token
/// that is in use.
final class ViewEntry: Sendable {
    let userIdentifier: String
    let provider: String
    /// The access token, or where to read it; carried over by every entry rebuilt from this one
    /// (same token, new status or policy), so a rebuild never reads it.
    let token: DeferredAccessToken
    let tokenType: String
    let scope: String?
    let issuedAt: Timestamp
    let expiresAt: Timestamp
    let sessionStartedAt: Timestamp
    /// The earliest of `exp`, `iat + max_token_age` and the session's end; the token is never
    /// served past it.
    let deadline: Timestamp
    let sessionEndsAt: Timestamp?
    /// The date after which only a new login helps, if one is known (``ReloginDeadline``).
    let relogin: ReloginDeadline?
    /// The token lives no longer than its provider's `refresh_margin`, which planning then
    /// shortens (``RefreshPolicy/plan(issuedAt:deadline:lastGrantAt:jitter:)``).
    let shorterThanMargin: Bool
    let readers: [Reader]
    let resolvedReaders: ResolvedReaders
    let enrolment: Enrolment
    let status: RefreshStatus
    let generation: Int64
    let hasRefreshToken: Bool
    let refreshTokenExpiresAt: Timestamp?
    /// The re-login warnings said so far, as stored.
    let reloginWarnings: ReloginWarningRecord?
    /// The planned proactive refresh, if one is scheduled.
    let nextRefreshAt: Timestamp?
    private let encodedReply = Mutex<[UInt8]?>(nil)
    /// ``credentials`` once opened: DPoP proofs need the token itself on every call, and an
    /// entry loaded at start-up would otherwise read it from the store each time.
    private let openedCredentials = Mutex<Credentials?>(nil)
    /// ``fingerprint`` once worked out (the audit trail's, at a connection's first release).
    private let fingerprintCache = Mutex<TokenFingerprint?>(nil)

    convenience init(credential: Credential, policy: RefreshPolicy, resolvedReaders: ResolvedReaders, nextRefreshAt: Timestamp?) {
        self.init(
            metadata: credential, token: .plain(credential.accessToken), hasRefreshToken: credential.refreshToken != nil,
            policy: policy, resolvedReaders: resolvedReaders, nextRefreshAt: nextRefreshAt)
    }

    /// An entry loaded at start-up; its token is read when first asked for.
    convenience init(indexed: IndexedCredential, policy: RefreshPolicy, resolvedReaders: ResolvedReaders, nextRefreshAt: Timestamp?) {
        self.init(
            metadata: indexed.metadata, token: indexed.accessToken, hasRefreshToken: indexed.hasRefreshToken,
            policy: policy, resolvedReaders: resolvedReaders, nextRefreshAt: nextRefreshAt)
    }

    /// The same token with a new policy, readers or status (reload, refresh bookkeeping).
    convenience init(
        rebuilding old: ViewEntry, policy: RefreshPolicy, resolvedReaders: ResolvedReaders, status: RefreshStatus, nextRefreshAt: Timestamp?
    ) {
        let metadata = Credential(
            userIdentifier: old.userIdentifier, provider: old.provider, accessToken: SecretString(""), refreshToken: nil,
            tokenType: old.tokenType, scope: old.scope, expiresAt: old.expiresAt, issuedAt: old.issuedAt,
            sessionStartedAt: old.sessionStartedAt, readers: old.readers, enrolment: old.enrolment, status: status,
            generation: old.generation, refreshTokenExpiresAt: old.refreshTokenExpiresAt, reloginWarnings: old.reloginWarnings
        )
        self.init(
            metadata: metadata, token: old.token, hasRefreshToken: old.hasRefreshToken, policy: policy, resolvedReaders: resolvedReaders,
            nextRefreshAt: nextRefreshAt)
        // The same token: its fingerprint, if known, is carried over rather than worked out again.
        let known = old.fingerprintCache.withLock { $0 }
        fingerprintCache.withLock { $0 = known }
    }

    /// `metadata`'s tokens are ignored: the access token is `token`.
    private init(
        metadata credential: Credential, token: DeferredAccessToken, hasRefreshToken: Bool, policy: RefreshPolicy,
        resolvedReaders: ResolvedReaders, nextRefreshAt: Timestamp?
    ) {
        self.token = token
        self.hasRefreshToken = hasRefreshToken
        userIdentifier = credential.userIdentifier
        provider = credential.provider
        tokenType = credential.tokenType
        scope = credential.scope
        issuedAt = credential.issuedAt
        expiresAt = credential.expiresAt
        sessionStartedAt = credential.sessionStartedAt
        deadline = policy.deadline(of: credential)
        sessionEndsAt = policy.sessionEnd(of: credential)
        refreshTokenExpiresAt = credential.refreshTokenExpiresAt
        reloginWarnings = credential.reloginWarnings
        relogin = ReloginDeadline.of(
            times: CredentialTimes(of: credential), policy: policy, renewable: hasRefreshToken || policy.renewsWithoutRefreshToken,
            refreshTokenExpiresAt: credential.refreshTokenExpiresAt,
            refreshTokenIssuedAt: credential.status.lastRefreshAt ?? credential.sessionStartedAt)
        shorterThanMargin = deadline - credential.issuedAt <= policy.minimumMargin
        readers = credential.readers
        self.resolvedReaders = resolvedReaders
        enrolment = credential.enrolment
        status = credential.status
        generation = credential.generation
        self.nextRefreshAt = nextRefreshAt
    }

    /// The access token (read from the store each time for an entry loaded at start-up: only
    /// rare paths need it, the hot path uses ``replyBytes``); empty if it cannot be read, and
    /// then ``replyBytes`` is an error reply, so it is never served.
    var accessToken: String { (try? token.open(userIdentifier: userIdentifier, provider: provider).value) ?? "" }

    /// `{"parameters":{"credentials":{…}}}`, ready to be written with its NUL; encoded on first
    /// use. A stored token that cannot be read gives a `StorageFailed` error reply instead,
    /// which is not kept (the next call tries again).
    var replyBytes: [UInt8] {
        if let cached = encodedReply.withLock({ $0 }) { return cached }
        guard let bytes = encodeReply() else {
            return ErrorReplies.encode(.storageFailed("the stored access token of '\(userIdentifier)' cannot be read"))
        }
        encodedReply.withLock { $0 = bytes }
        return bytes
    }

    /// What the audit trail records of the token (``TokenFingerprint``), worked out on first use;
    /// nil if the stored token cannot be read (then no token is served either).
    var fingerprint: TokenFingerprint? {
        if let known = fingerprintCache.withLock({ $0 }) { return known }
        guard let secret = try? token.open(userIdentifier: userIdentifier, provider: provider) else { return nil }
        let fingerprint = TokenFingerprint(of: secret.value)
        fingerprintCache.withLock { $0 = fingerprint }
        return fingerprint
    }

    /// The credentials as a caller gets them, opened once; nil if the stored token cannot be
    /// read (not kept: the next call tries again).
    var credentials: Credentials? {
        if let opened = openedCredentials.withLock({ $0 }) { return opened }
        guard let opened = openCredentials() else { return nil }
        openedCredentials.withLock { $0 = opened }
        return opened
    }

    /// The credentials, the token read (or taken from memory) now; kept by nobody.
    private func openCredentials() -> Credentials? {
        guard let secret = try? token.open(userIdentifier: userIdentifier, provider: provider) else { return nil }
        return Credentials(
            userIdentifier: userIdentifier,
            accessToken: secret.value,
            tokenType: tokenType,
            expiresAt: deadline.secondsSince1970,
            issuedAt: issuedAt.secondsSince1970,
            scope: scope
        )
    }

    /// Whether the token is bound to the credential's DPoP key (`token_type` `DPoP`, RFC 9449
    /// §5), so that presenting it takes a proof.
    var isDPoPBound: Bool { tokenType.lowercased() == "dpop" }

    private func encodeReply() -> [UInt8]? {
        // Not ``credentials``: the reply is all a token caller's entry keeps (one copy).
        guard let wire = openCredentials() else { return nil }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(160 + wire.accessToken.utf8.count)
        VarlinkReply(parameters: ["credentials": .object(wire.json)]).encode(into: &bytes)
        // Kept for the entry's lifetime: trim the reserve (a million replies, 32 bytes each).
        return bytes.withUnsafeBufferPointer { Array($0) }
    }

    /// The state as a caller should see it now: a token past its deadline reads as expired
    /// even before any timer noticed.
    func effectiveState(now: Timestamp) -> CredentialState {
        if status.state == .reauthenticationRequired { return .reauthenticationRequired }
        if now >= deadline, status.state == .valid { return .expired }
        return status.state
    }

    func credentialStatus(now: Timestamp) -> CredentialStatus {
        var status = CredentialStatus(
            userIdentifier: userIdentifier,
            provider: provider,
            state: effectiveState(now: now).rawValue,
            expiresAt: deadline.secondsSince1970,
            issuedAt: issuedAt.secondsSince1970,
            sessionStartedAt: sessionStartedAt.secondsSince1970,
            sessionEndsAt: sessionEndsAt?.secondsSince1970,
            nextRefreshAt: nextRefreshAt?.secondsSince1970,
            lastRefreshAt: status.lastRefreshAt?.secondsSince1970,
            refreshCount: status.refreshCount,
            lastError: status.lastError,
            readers: readers.map(\.description),
            enrolledByUid: Int64(enrolment.uid)
        )
        if shorterThanMargin { status.shorterThanMargin = true }
        status.reloginBy = relogin?.at.secondsSince1970
        status.reloginReason = relogin?.reason.rawValue
        status.tokenType = tokenType
        return status
    }
}

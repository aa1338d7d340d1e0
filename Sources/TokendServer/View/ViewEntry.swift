import TokendCore
import TokendJSON
import TokendProtocol

/// What the event loops need to answer `ProvideTokenReplacement` for one user without touching
/// the store: the token, its deadline, who may read it, and the reply already encoded.
///
/// Immutable: a refresh replaces the entry as a whole, so a reader never sees half an update.
final class ViewEntry: Sendable {
    let userIdentifier: String
    let provider: String
    let accessToken: String
    let tokenType: String
    let scope: String?
    let issuedAt: Timestamp
    let expiresAt: Timestamp
    let sessionStartedAt: Timestamp
    /// The earliest of `exp`, `iat + max_token_age` and the session's end; the token is never
    /// served past it.
    let deadline: Timestamp
    let sessionEndsAt: Timestamp?
    let readers: [Reader]
    let resolvedReaders: ResolvedReaders
    let enrolment: Enrolment
    let status: RefreshStatus
    let generation: Int64
    let hasRefreshToken: Bool
    /// The planned proactive refresh, if one is scheduled.
    let nextRefreshAt: Timestamp?
    /// `{"parameters":{"credentials":{…}}}`, ready to be written with its NUL.
    let replyBytes: [UInt8]

    convenience init(credential: Credential, policy: RefreshPolicy, resolvedReaders: ResolvedReaders, nextRefreshAt: Timestamp?) {
        self.init(fields: credential, hasRefreshToken: credential.refreshToken != nil, policy: policy, resolvedReaders: resolvedReaders, nextRefreshAt: nextRefreshAt)
    }

    /// The same token with a new policy, readers or status (reload, refresh bookkeeping).
    convenience init(rebuilding old: ViewEntry, policy: RefreshPolicy, resolvedReaders: ResolvedReaders, status: RefreshStatus, nextRefreshAt: Timestamp?) {
        let credential = Credential(
            userIdentifier: old.userIdentifier, provider: old.provider, accessToken: SecretString(old.accessToken), refreshToken: nil,
            tokenType: old.tokenType, scope: old.scope, expiresAt: old.expiresAt, issuedAt: old.issuedAt,
            sessionStartedAt: old.sessionStartedAt, readers: old.readers, enrolment: old.enrolment, status: status, generation: old.generation
        )
        self.init(fields: credential, hasRefreshToken: old.hasRefreshToken, policy: policy, resolvedReaders: resolvedReaders, nextRefreshAt: nextRefreshAt)
    }

    private init(fields credential: Credential, hasRefreshToken: Bool, policy: RefreshPolicy, resolvedReaders: ResolvedReaders, nextRefreshAt: Timestamp?) {
        self.hasRefreshToken = hasRefreshToken
        userIdentifier = credential.userIdentifier
        provider = credential.provider
        accessToken = credential.accessToken.value
        tokenType = credential.tokenType
        scope = credential.scope
        issuedAt = credential.issuedAt
        expiresAt = credential.expiresAt
        sessionStartedAt = credential.sessionStartedAt
        deadline = policy.deadline(of: credential)
        sessionEndsAt = policy.sessionEnd(of: credential)
        readers = credential.readers
        self.resolvedReaders = resolvedReaders
        enrolment = credential.enrolment
        status = credential.status
        generation = credential.generation
        self.nextRefreshAt = nextRefreshAt
        let wire = Credentials(
            userIdentifier: credential.userIdentifier,
            accessToken: credential.accessToken.value,
            tokenType: credential.tokenType,
            expiresAt: deadline.secondsSince1970,
            issuedAt: credential.issuedAt.secondsSince1970,
            scope: credential.scope
        )
        var bytes: [UInt8] = []
        bytes.reserveCapacity(160 + accessToken.utf8.count)
        VarlinkReply(parameters: ["credentials": .object(wire.json)]).encode(into: &bytes)
        replyBytes = bytes
    }

    /// The state as a caller should see it now: a token past its deadline reads as expired
    /// even before any timer noticed.
    func effectiveState(now: Timestamp) -> CredentialState {
        if status.state == .reauthenticationRequired { return .reauthenticationRequired }
        if now >= deadline, status.state == .valid { return .expired }
        return status.state
    }

    func credentialStatus(now: Timestamp) -> CredentialStatus {
        CredentialStatus(
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
    }
}

/// Everything tokend keeps for one user identifier.
///
/// The store persists every field (the tokens encrypted); the refresh engine reads and writes
/// them; only `accessToken` and the non-secret metadata ever leave the daemon.
public struct Credential: Sendable, Hashable {
    /// The key clients ask by, e.g. `alice` or `svc-backup`.
    public var userIdentifier: String
    /// The name of the provider entry in the configuration this credential refreshes against.
    public var provider: String
    public var accessToken: SecretString
    /// Goes nowhere but to the provider (or its `exec` refresher).
    public var refreshToken: SecretString?
    public var tokenType: String
    public var scope: String?
    /// When the access token stops working: `exp` from the JWT, else `expires_in` on receipt.
    public var expiresAt: Timestamp
    /// The access token's `iat` when it is a JWT, else when tokend received it.
    public var issuedAt: Timestamp
    /// The `issuedAt` of the first token of this login, kept across every refresh and rotation;
    /// `max_session_age` counts from here.
    public var sessionStartedAt: Timestamp
    /// Who may read the access token, as configured (`uid:N`, `user:NAME`, `group:NAME`).
    public var readers: [Reader]
    public var enrolment: Enrolment
    public var status: RefreshStatus
    /// Bumped by every write of this credential; the store refuses a write based on an older
    /// generation, so two writers can never silently overwrite each other.
    public var generation: Int64

    public init(
        userIdentifier: String,
        provider: String,
        accessToken: SecretString,
        refreshToken: SecretString?,
        tokenType: String,
        scope: String?,
        expiresAt: Timestamp,
        issuedAt: Timestamp,
        sessionStartedAt: Timestamp,
        readers: [Reader],
        enrolment: Enrolment,
        status: RefreshStatus = RefreshStatus(),
        generation: Int64 = 0
    ) {
        self.userIdentifier = userIdentifier
        self.provider = provider
        self.accessToken = accessToken
        self.refreshToken = refreshToken
        self.tokenType = tokenType
        self.scope = scope
        self.expiresAt = expiresAt
        self.issuedAt = issuedAt
        self.sessionStartedAt = sessionStartedAt
        self.readers = readers
        self.enrolment = enrolment
        self.status = status
        self.generation = generation
    }
}

/// Who put a credential into tokend, and when.
public struct Enrolment: Sendable, Hashable {
    public var uid: UInt32
    public var pid: Int32
    public var at: Timestamp

    public init(uid: UInt32, pid: Int32, at: Timestamp) {
        self.uid = uid
        self.pid = pid
        self.at = at
    }
}

/// The refresh bookkeeping of a credential: its state and the outcome of recent grants.
public struct RefreshStatus: Sendable, Hashable {
    public var state: CredentialState
    public var lastRefreshAt: Timestamp?
    /// A one-line, token-free description of the last failure.
    public var lastError: String?
    public var refreshCount: Int64
    /// Set durably before a grant's request is sent and cleared when its result is stored: after
    /// a crash, a set value means a rotation may have been interrupted.
    public var grantStartedAt: Timestamp?
    /// When the next attempt is due after a transient failure.
    public var retryAt: Timestamp?

    public init(
        state: CredentialState = .valid,
        lastRefreshAt: Timestamp? = nil,
        lastError: String? = nil,
        refreshCount: Int64 = 0,
        grantStartedAt: Timestamp? = nil,
        retryAt: Timestamp? = nil
    ) {
        self.state = state
        self.lastRefreshAt = lastRefreshAt
        self.lastError = lastError
        self.refreshCount = refreshCount
        self.grantStartedAt = grantStartedAt
        self.retryAt = retryAt
    }
}

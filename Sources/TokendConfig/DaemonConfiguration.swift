import TokendCore

/// Everything the daemon is configured with: where it listens and keeps state, who administers
/// it, its limits, and the providers its credentials refresh against.
public struct DaemonConfiguration: Sendable, Hashable {
    /// The configuration file this came from (`nil` for built-in defaults).
    public var sourceFile: String?
    /// The Unix socket path to listen on (when not socket-activated).
    public var socketPath: String
    /// The administrators' socket (when not socket-activated): root only, beside the public one;
    /// `nil` for none (`admin_socket = ""`). By default `socketPath` + `.admin`.
    public var adminSocketPath: String?
    /// The socket file's mode. Connecting is open to everyone who should be able to ask; each
    /// call is then checked against the caller's identity.
    public var socketMode: UInt32
    /// Where the SQLite store and its lock live.
    public var stateDirectory: String
    /// The master key file, used when `$CREDENTIALS_DIRECTORY/tokend.key` does not exist.
    public var keyFile: String
    /// Groups whose members (besides root) may call administrative methods.
    public var adminGroups: [String]
    /// Whether non-administrators may add and remove credentials read only by themselves.
    public var allowSelfEnrolment: Bool
    /// Connections beyond this many are closed on accept.
    public var maxConnections: Int
    /// What one local user may make tokend hold (`max_connections_per_uid`,
    /// `reserved_admin_connections`, `max_credentials_per_uid`, `max_calls_in_flight_per_uid`).
    public var quotas: UserQuotas = UserQuotas()
    /// The largest message a client may send, in bytes (without the NUL).
    public var maxMessageBytes: Int
    /// Calls on one connection that may wait for their replies at once; reading pauses beyond it,
    /// so a client that pipelines without reading cannot grow the daemon's memory.
    public var maxPipelinedCalls: Int
    /// Every call that must wait (for a refresh) is answered within this, with an error if need be.
    public var callTimeout: Duration
    /// swift-log level name: trace, debug, info, notice, warning, error, critical.
    public var logLevel: String
    public var providers: [String: ProviderConfiguration]
    /// Caps and timeouts of the refresh engine.
    public var refreshLimits: RefreshLimits = RefreshLimits()
    /// Token files by user identifier.
    public var tokenFiles: [String: TokenFileConfiguration] = [:]
    /// How long a graceful stop waits for in-flight replies and grants before closing anyway.
    public var shutdownTimeout: Duration = .seconds(10)
    /// A client that begins a message must finish it within this (time the daemon waits on the
    /// client only); otherwise its connection is closed (a "slowloris" client).
    public var messageTimeout: Duration = .seconds(10)
    /// The Prometheus endpoint and textfile (off by default).
    public var metrics: MetricsConfiguration = MetricsConfiguration()
    /// The audit trail of token releases and refusals (`[audit]`, off by default).
    public var audit: AuditConfiguration = AuditConfiguration()
    /// Where credentials are kept (`[store]`): SQLite by default, or a shared PostgreSQL database.
    public var store: StoreConfiguration = .sqlite
    /// The `LoadCredential=` socket (when not socket-activated): root only; `nil` (the default)
    /// for none (`load_credential.socket`).
    public var loadCredentialSocketPath: String?
    /// What the `LoadCredential=` socket serves (`[load_credential]`).
    public var loadCredential = LoadCredentialSettings()
    /// This node's name among those sharing a store (`daemon.node_name`); `nil` means the host name.
    public var nodeName: String?

    public static let defaultConfigurationFile = "/etc/tokend/tokend.toml"
    public static let defaultSocketPath = "/run/tokend/io.tokend"
    /// `socket_mode`'s default: every local user may connect.
    public static let defaultSocketMode: UInt32 = 0o666
    /// What the administrators' socket's path adds to the public socket's by default.
    public static let adminSocketSuffix = ".admin"
    public static let defaultStateDirectory = "/var/lib/tokend"

    public init(
        sourceFile: String? = nil,
        socketPath: String = DaemonConfiguration.defaultSocketPath,
        socketMode: UInt32 = DaemonConfiguration.defaultSocketMode,
        stateDirectory: String = DaemonConfiguration.defaultStateDirectory,
        keyFile: String? = nil,
        adminGroups: [String] = [],
        allowSelfEnrolment: Bool = true,
        maxConnections: Int = 1024,
        maxMessageBytes: Int = 65536,
        maxPipelinedCalls: Int = 128,
        callTimeout: Duration = .seconds(30),
        logLevel: String = "info",
        providers: [String: ProviderConfiguration] = [:]
    ) {
        self.sourceFile = sourceFile
        self.socketPath = socketPath
        self.adminSocketPath = socketPath + Self.adminSocketSuffix
        self.socketMode = socketMode
        self.stateDirectory = stateDirectory
        self.keyFile = keyFile ?? stateDirectory + "/tokend.key"
        self.adminGroups = adminGroups
        self.allowSelfEnrolment = allowSelfEnrolment
        self.maxConnections = maxConnections
        self.maxMessageBytes = maxMessageBytes
        self.maxPipelinedCalls = maxPipelinedCalls
        self.callTimeout = callTimeout
        self.logLevel = logLevel
        self.providers = providers
    }
}

/// A named provider: where its credentials are refreshed and by which rules.
public struct ProviderConfiguration: Sendable, Hashable {
    public var name: String
    public var kind: Kind
    public var refreshPolicy: RefreshPolicy

    public enum Kind: Sendable, Hashable {
        /// An OAuth 2.0 token endpoint (RFC 6749 §6 refresh grant).
        case oauth2(OAuth2Settings)
        /// A local command that performs the refresh.
        case exec(ExecSettings)
        /// A HAT PDA: verified RS256 tokens, renewed through a response header.
        case hat(HATSettings)
    }

    /// Grants per second this provider may receive from tokend (a token bucket).
    public var rateLimit: Double
    /// How many grants may go out at once before the rate limit applies.
    public var rateBurst: Int
    /// Whether users other than administrators may enrol credentials for this provider
    /// (`allow_self_enrolment`, within the daemon's own setting). Off by default for `exec`
    /// providers, whose command may mint tokens with tokend's own authority; on for the others.
    public var allowSelfEnrolment: Bool
    /// Warnings ahead of a credential's re-login date (`relogin_warning`, `relogin_command`).
    public var relogin = ReloginSettings()

    public init(name: String, kind: Kind, refreshPolicy: RefreshPolicy = RefreshPolicy(), rateLimit: Double = 50, rateBurst: Int = 20) {
        self.name = name
        self.kind = kind
        self.refreshPolicy = refreshPolicy
        self.rateLimit = rateLimit
        self.rateBurst = rateBurst
        switch kind {
        case .exec: self.allowSelfEnrolment = false
        case .oauth2, .hat: self.allowSelfEnrolment = true
        }
        switch kind {
        case .oauth2: self.refreshPolicy.renewsWithoutRefreshToken = false
        case .exec, .hat: self.refreshPolicy.renewsWithoutRefreshToken = true
        }
    }
}

/// How a token endpoint authenticates tokend (RFC 6749 §2.3).
public enum ClientAuthentication: String, Sendable, Hashable, CaseIterable {
    case none
    case clientSecretBasic = "client_secret_basic"
    case clientSecretPost = "client_secret_post"
    /// A JWT signed with the client's private key (RFC 7523 §2.2): no secret is sent.
    case privateKeyJWT = "private_key_jwt"
    /// The TLS client certificate, issued by a CA the provider trusts (RFC 8705 §2.1).
    case tlsClientAuth = "tls_client_auth"
    /// The TLS client certificate, self-signed and registered with the provider (RFC 8705 §2.2).
    case selfSignedTLSClientAuth = "self_signed_tls_client_auth"

    /// Whether the client authenticates with its TLS certificate (RFC 8705).
    public var usesTLSCertificate: Bool { self == .tlsClientAuth || self == .selfSignedTLSClientAuth }
}

/// A TLS client certificate and its key, presented to a provider's servers (mutual TLS).
public struct TLSClientIdentity: Sendable, Hashable {
    /// The certificate chain, PEM, the client's certificate first.
    public var certificatePEM: String
    /// The private key, PEM; never logged.
    public var keyPEM: SecretString
    /// Where they were read from, for messages.
    public var certificateSource: String
    public var keySource: String
    /// The key that named the private key: `tls_client_key_file` or `tls_client_key_credential`.
    public var keyConfigurationKey = "tls_client_key_file"

    public init(certificatePEM: String, keyPEM: SecretString, certificateSource: String, keySource: String) {
        self.certificatePEM = certificatePEM
        self.keyPEM = keyPEM
        self.certificateSource = certificateSource
        self.keySource = keySource
    }
}

/// The `aud` of a `private_key_jwt` client assertion.
public enum ClientAssertionAudience: Sendable, Hashable {
    /// The URL the request goes to: the token endpoint for grants, the revocation or device
    /// authorization endpoint for those requests (what glewlwyd checks).
    case endpoint
    /// The token endpoint's URL for every request (RFC 7523 §3).
    case tokenEndpoint
    /// The OpenID Connect issuer.
    case issuer
    /// A URL the provider documents.
    case url(String)
}

/// The private key that signs `private_key_jwt` client assertions; it never leaves tokend.
public struct ClientAssertionKey: Sendable, Hashable {
    /// The PEM text (PKCS #8, SEC 1 or PKCS #1): a P-256 key signs ES256, an RSA key of at
    /// least 2048 bits RS256.
    public var pem: SecretString
    /// Where it was read from, for messages.
    public var source: String
    /// The key that named it: `client_assertion_key_file` or `client_assertion_key_credential`.
    public var configurationKey = "client_assertion_key_file"
    /// The `kid` header, when the provider registered several keys.
    public var keyID: String?
    public var audience: ClientAssertionAudience

    public init(pem: SecretString, source: String, keyID: String? = nil, audience: ClientAssertionAudience = .endpoint) {
        self.pem = pem
        self.source = source
        self.keyID = keyID
        self.audience = audience
    }
}

/// An OAuth 2.0 provider's endpoints and client registration.
public struct OAuth2Settings: Sendable, Hashable {
    /// The token endpoint; `nil` when it is discovered from `issuer`.
    public var tokenEndpoint: String?
    /// The OpenID Connect issuer, for discovery (`/.well-known/openid-configuration`).
    public var issuer: String?
    /// RFC 7009 revocation endpoint, when known (or discovered).
    public var revocationEndpoint: String?
    public var clientID: String
    public var clientSecret: SecretString?
    public var clientAuthentication: ClientAuthentication
    public var scope: String?
    /// A PEM file of CA certificates trusted for this provider, besides the system's.
    public var caFile: String?
    /// How the provider's servers are reached: through the environment's proxy (the default),
    /// directly, or through a proxy of its own.
    public var proxy: ProxySetting = .environment
    /// Where `tokenctl login` sends the browser (RFC 6749 §3.1); discovered from `issuer` when unset.
    public var authorizationEndpoint: String?
    /// The RFC 8628 device authorization endpoint; discovered from `issuer` when unset.
    public var deviceAuthorizationEndpoint: String?
    /// A fixed loopback port for the login redirect (`http://127.0.0.1:PORT/callback`), for
    /// providers that register an exact redirect URI; `nil` lets `tokenctl login` pick one.
    public var redirectPort: Int?
    /// Whether access tokens must be JWTs signed by the issuer (checked against its JWKS) at login.
    public var verifyAccessToken: Bool = false
    /// Whether new credentials of this provider get a DPoP key (RFC 9449), to which the
    /// provider binds their tokens: logins and refreshes carry proofs of it.
    public var dpop: Bool = false
    /// Whether the provider binds a credential's tokens to a new DPoP key at its refresh, when
    /// its refresh token was issued without one (RFC 9449 §5, confidential clients)
    /// (`dpop_bind_on_refresh = true`): then `AddCredential` may enrol bearer tokens for a DPoP
    /// provider. Off by default, since providers that bind refresh tokens refuse that refresh.
    public var dpopBindOnRefresh: Bool = false
    /// Whether programs may ask for tokens narrowed to a scope or resource
    /// (`narrowed_tokens = true`), got with refresh grants that carry `scope`/`resource`.
    /// Off by default: a provider that breaks RFC 6749 §6 narrows the refresh token itself on
    /// such a grant, and so the credential's own token from then on.
    public var narrowedTokens: Bool = false
    /// The `aud` that JWT access tokens must carry, when `verifyAccessToken` is on.
    public var audience: String?
    /// The signing key of `client_auth = "private_key_jwt"`.
    public var clientAssertionKey: ClientAssertionKey?
    /// The TLS client certificate presented to the provider's servers (mutual TLS), required by
    /// `tls_client_auth` and `self_signed_tls_client_auth`.
    public var tlsClientIdentity: TLSClientIdentity?

    public init(
        tokenEndpoint: String? = nil, issuer: String? = nil, revocationEndpoint: String? = nil, clientID: String,
        clientSecret: SecretString? = nil, clientAuthentication: ClientAuthentication = .clientSecretBasic,
        scope: String? = nil, caFile: String? = nil
    ) {
        self.tokenEndpoint = tokenEndpoint
        self.issuer = issuer
        self.revocationEndpoint = revocationEndpoint
        self.clientID = clientID
        self.clientSecret = clientSecret
        self.clientAuthentication = clientAuthentication
        self.scope = scope
        self.caFile = caFile
    }
}

extension ProviderConfiguration {
    /// Whether new credentials of this provider get a DPoP key (`dpop = true`).
    public var usesDPoP: Bool {
        if case .oauth2(let settings) = kind { return settings.dpop }
        return false
    }

    /// Whether `AddCredential` may enrol bearer tokens for this DPoP provider
    /// (`dpop_bind_on_refresh = true`).
    public var dpopBindsOnRefresh: Bool {
        if case .oauth2(let settings) = kind { return settings.dpopBindOnRefresh }
        return false
    }

    /// Whether programs may ask this provider's credentials for narrowed tokens.
    public var allowsNarrowedTokens: Bool {
        if case .oauth2(let settings) = kind { return settings.narrowedTokens }
        return false
    }
}

import Logging
import Synchronization
import TokendConfig
import TokendCore
import TokendOAuth

/// Runs a refresh for one provider kind. The only code that sees refresh tokens leave tokend.
protocol ProviderRefresher: Sendable {
    /// Exchanges the credential's refresh token for new tokens. Never throws: every failure is a
    /// classified `GrantOutcome`. `stormPacing` is nonzero for a grant of a refresh storm: the
    /// interval at which the HTTP loop handles its sockets meanwhile (``StormPacer``); the exec
    /// refresher has no HTTP and ignores it. `narrowing` asks for a narrowed token (only of
    /// OAuth 2.0 providers; the others are never asked).
    func refresh(
        _ credential: Credential, narrowing: TokenNarrowing?, stormPacing: Duration, now: @escaping @Sendable () -> Timestamp
    ) async -> GrantOutcome
    /// Revokes the credential's refresh token at the provider, if the provider supports it.
    func revoke(_ credential: Credential) async -> RevocationOutcome
}

/// What a removal's revocation (RFC 7009) achieved.
enum RevocationOutcome: Sendable, Equatable {
    case revoked
    /// The provider has no revocation endpoint (or no such thing, for `exec` and HAT).
    case unsupported
    /// A token-free reason.
    case failed(String)
}

/// OAuth 2.0 providers: RFC 6749 §6 refresh grant, RFC 7009 revocation, OIDC discovery.
final class OAuth2Refresher: ProviderRefresher {
    let settings: OAuth2Settings
    let client: TokenEndpointClient
    let discovery: OIDCDiscovery
    private let discovered = Mutex<ProviderMetadata?>(nil)

    init(settings: OAuth2Settings, pool: HTTPClientPool) {
        self.settings = settings
        self.client = TokenEndpointClient(pool: pool)
        self.discovery = OIDCDiscovery(pool: pool)
    }

    /// The token and revocation endpoints: configured, else discovered from the issuer (once,
    /// then cached; a failed discovery is retried on the next grant).
    func endpoints() async -> (token: String, revocation: String?)? {
        // A client with a TLS certificate uses the provider's mutual-TLS aliases (RFC 8705 §5).
        let mutualTLS = settings.tlsClientIdentity != nil
        if let token = settings.tokenEndpoint {
            return (token, settings.revocationEndpoint ?? discovered.withLock { $0?.revocationEndpoint(mutualTLS: mutualTLS) })
        }
        if let metadata = discovered.withLock({ $0 }) {
            return (
                metadata.tokenEndpoint(mutualTLS: mutualTLS),
                settings.revocationEndpoint ?? metadata.revocationEndpoint(mutualTLS: mutualTLS)
            )
        }
        guard let issuer = settings.issuer,
            let metadata = try? await discovery.discover(issuer: issuer, caFile: settings.caFile, proxy: settings.proxy)
        else {
            return nil
        }
        discovered.withLock { $0 = metadata }
        return (
            metadata.tokenEndpoint(mutualTLS: mutualTLS), settings.revocationEndpoint ?? metadata.revocationEndpoint(mutualTLS: mutualTLS)
        )
    }

    func refresh(
        _ credential: Credential, narrowing: TokenNarrowing?, stormPacing: Duration, now: @escaping @Sendable () -> Timestamp
    ) async -> GrantOutcome {
        guard let refreshToken = credential.refreshToken else {
            return .permanent(error: "no_refresh_token", description: "the credential has no refresh token")
        }
        guard let endpoints = await endpoints() else {
            return .transient(reason: "OpenID Connect discovery for \(settings.issuer ?? "?") failed", retryAfter: nil)
        }
        var dpopKey: DPoPKey?
        if let secret = credential.dpopKey {
            do {
                dpopKey = try DPoPKey(secret)
            } catch {
                return .permanent(error: "invalid_dpop_key", description: error.description)
            }
        }
        return await client.refresh(
            endpoint: endpoints.token, settings: settings, refreshToken: refreshToken, dpopKey: dpopKey, narrowing: narrowing,
            stormPacing: stormPacing, now: now)
    }

    func revoke(_ credential: Credential) async -> RevocationOutcome {
        // A configured revocation endpoint is used even when discovery fails meanwhile.
        let known = await endpoints()
        guard let endpoint = known?.revocation ?? settings.revocationEndpoint else {
            if known == nil, settings.issuer != nil {
                return .failed("OpenID Connect discovery for \(settings.issuer ?? "?") failed, so the revocation endpoint is unknown")
            }
            return .unsupported
        }
        // The token endpoint, discovered or not, for an assertion whose audience it is.
        var settings = self.settings
        settings.tokenEndpoint = known?.token ?? settings.tokenEndpoint
        let problem: String?
        if let refreshToken = credential.refreshToken {
            problem = await client.revoke(endpoint: endpoint, settings: settings, token: refreshToken, tokenTypeHint: "refresh_token")
        } else {
            problem = await client.revoke(
                endpoint: endpoint, settings: settings, token: credential.accessToken, tokenTypeHint: "access_token")
        }
        return problem.map(RevocationOutcome.failed) ?? .revoked
    }
}

/// The refreshers for the configured providers, rebuilt on reload.
struct Refreshers: Sendable {
    let byProvider: [String: any ProviderRefresher]
    /// The token verifiers of `hat` providers, shared by enrolment and renewal (one key cache).
    let hatVerifiers: [String: HATTokenVerifier]

    init(providers: [String: ProviderConfiguration], pool: HTTPClientPool) {
        var byProvider: [String: any ProviderRefresher] = [:]
        var hatVerifiers: [String: HATTokenVerifier] = [:]
        for (name, provider) in providers {
            switch provider.kind {
            case .oauth2(let settings): byProvider[name] = OAuth2Refresher(settings: settings, pool: pool)
            case .exec(let settings): byProvider[name] = ExecRefresher(providerName: name, settings: settings)
            case .hat(let settings):
                let verifier = HATTokenVerifier(settings: settings, pool: pool)
                hatVerifiers[name] = verifier
                byProvider[name] = HATRefresher(settings: settings, verifier: verifier, pool: pool)
            }
            byProvider[name] = byProvider[name].map { MeasuredRefresher(provider: name, inner: $0) }
        }
        self.byProvider = byProvider
        self.hatVerifiers = hatVerifiers
    }
}

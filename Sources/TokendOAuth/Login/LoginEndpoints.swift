import TokendConfig
import TokendCore

/// Where a provider's logins go: the configured endpoints, else the ones its issuer's
/// discovery document names.
public struct LoginEndpoints: Sendable, Hashable {
    public var token: String
    public var authorization: String?
    public var deviceAuthorization: String?
    /// The issuer whose JWKS verifies ID tokens (OpenID Connect), when there is one.
    public var issuer: String?
    public var jwksURI: String?

    /// Resolves the endpoints of `settings`, discovering from its issuer when one is set.
    /// - Throws: ``LoginError`` when discovery fails or no token endpoint is known.
    public static func resolve(_ settings: OAuth2Settings, discovery: OIDCDiscovery) async throws(LoginError) -> LoginEndpoints {
        var metadata: ProviderMetadata?
        if let issuer = settings.issuer {
            do {
                metadata = try await discovery.discover(issuer: issuer, caFile: settings.caFile, proxy: settings.proxy)
            } catch {
                throw LoginError("OpenID Connect discovery for \(issuer) failed: \(error.description)")
            }
        }
        // A client with a TLS certificate uses the provider's mutual-TLS aliases (RFC 8705 §5).
        let mutualTLS = settings.tlsClientIdentity != nil
        guard let token = settings.tokenEndpoint ?? metadata?.tokenEndpoint(mutualTLS: mutualTLS) else {
            throw LoginError("the provider has no token endpoint")
        }
        return LoginEndpoints(
            token: token,
            authorization: settings.authorizationEndpoint ?? metadata?.authorizationEndpoint,
            deviceAuthorization: settings.deviceAuthorizationEndpoint ?? metadata?.deviceAuthorizationEndpoint(mutualTLS: mutualTLS),
            issuer: metadata?.issuer,
            jwksURI: metadata?.jwksURI
        )
    }
}

import AsyncHTTPClient
import NIOCore
import TokendCore
import TokendJSON

/// What `/.well-known/openid-configuration` says about an issuer (the parts tokend uses).
public struct ProviderMetadata: Sendable, Hashable {
    public var issuer: String
    public var tokenEndpoint: String
    public var revocationEndpoint: String?
    public var deviceAuthorizationEndpoint: String?
    public var authorizationEndpoint: String?
    public var jwksURI: String?
    /// RFC 8705 §5: the endpoints a client using mutual TLS must use instead, by metadata name
    /// (`token_endpoint`, `revocation_endpoint`, `device_authorization_endpoint`, …).
    public var mtlsEndpointAliases: [String: String] = [:]

    /// The token endpoint for a client that uses mutual TLS or not.
    public func tokenEndpoint(mutualTLS: Bool) -> String {
        endpoint("token_endpoint", tokenEndpoint, mutualTLS: mutualTLS) ?? tokenEndpoint
    }

    public func revocationEndpoint(mutualTLS: Bool) -> String? {
        endpoint("revocation_endpoint", revocationEndpoint, mutualTLS: mutualTLS)
    }

    public func deviceAuthorizationEndpoint(mutualTLS: Bool) -> String? {
        endpoint("device_authorization_endpoint", deviceAuthorizationEndpoint, mutualTLS: mutualTLS)
    }

    /// `plain`, or for a mutual-TLS client its alias (RFC 8705 §5) when the provider has one.
    private func endpoint(_ name: String, _ plain: String?, mutualTLS: Bool) -> String? {
        mutualTLS ? mtlsEndpointAliases[name] ?? plain : plain
    }
}

public struct DiscoveryError: Error, Sendable, CustomStringConvertible {
    public var description: String
}

/// OpenID Connect discovery (OpenID Connect Discovery 1.0 §4).
public struct OIDCDiscovery: Sendable {
    public let pool: HTTPClientPool

    public init(pool: HTTPClientPool) { self.pool = pool }

    public func discover(issuer: String, caFile: String?, proxy: ProxySetting = .environment) async throws(DiscoveryError)
        -> ProviderMetadata
    {
        do {
            _ = try EndpointPolicy.check(issuer)
        } catch {
            throw DiscoveryError(description: error.description)
        }
        let base = issuer.hasSuffix("/") ? String(issuer.dropLast()) : issuer
        let url = base + "/.well-known/openid-configuration"
        let body: ByteBuffer
        do {
            let response = try await pool.client(for: url, caFile: caFile, proxy: proxy).execute(
                HTTPClientRequest(url: url), timeout: .milliseconds(pool.timeouts.request.milliseconds))
            guard response.status == .ok else { throw DiscoveryError(description: "\(url) answered \(response.status.code)") }
            body = try await response.body.collect(upTo: 1 << 20)
        } catch let error as DiscoveryError {
            throw error
        } catch {
            throw DiscoveryError(description: "cannot fetch \(url): \(TokenEndpointClient.describe(error))")
        }
        return try Self.parse(Array(buffer: body), expectedIssuer: base)
    }

    /// Parses a discovery document. The issuer it names must be the one asked for (§4.3).
    public static func parse(_ body: [UInt8], expectedIssuer: String) throws(DiscoveryError) -> ProviderMetadata {
        guard case .object(let object)? = try? JSONParser.parse(body) else {
            throw DiscoveryError(description: "the discovery document is not a JSON object")
        }
        guard let issuer = object["issuer"]?.stringValue else { throw DiscoveryError(description: "the discovery document has no issuer") }
        let normalizedIssuer = issuer.hasSuffix("/") ? String(issuer.dropLast()) : issuer
        guard normalizedIssuer == expectedIssuer else {
            throw DiscoveryError(description: "the discovery document names issuer \(issuer), not \(expectedIssuer)")
        }
        guard let token = object["token_endpoint"]?.stringValue else {
            throw DiscoveryError(description: "the discovery document has no token_endpoint")
        }
        var aliases: [String: String] = [:]
        if case .object(let members)? = object["mtls_endpoint_aliases"] {
            for (name, value) in members.members { if let url = value.stringValue { aliases[name] = url } }
        }
        return ProviderMetadata(
            issuer: issuer,
            tokenEndpoint: token,
            revocationEndpoint: object["revocation_endpoint"]?.stringValue,
            deviceAuthorizationEndpoint: object["device_authorization_endpoint"]?.stringValue,
            authorizationEndpoint: object["authorization_endpoint"]?.stringValue,
            jwksURI: object["jwks_uri"]?.stringValue,
            mtlsEndpointAliases: aliases
        )
    }
}

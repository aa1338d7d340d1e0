import AsyncHTTPClient
import Logging
import NIOCore
import NIOHTTP1
import TokendConfig
import TokendCore

/// Talks to OAuth 2.0 token and revocation endpoints. The only place refresh tokens leave
/// tokend over the network.
public struct TokenEndpointClient: Sendable {
    public let pool: HTTPClientPool
    /// Responses larger than this are not token responses; reading stops there.
    public static let maximumResponseBytes = 256 * 1024

    public init(pool: HTTPClientPool) { self.pool = pool }

    /// Runs the RFC 6749 §6 refresh grant. Never throws: network failures, timeouts and odd
    /// responses come back as `.transient`, so the caller has one thing to handle.
    public func refresh(
        endpoint: String,
        settings: OAuth2Settings,
        refreshToken: SecretString,
        now: @Sendable () -> Timestamp
    ) async -> GrantOutcome {
        // Checked again here: a discovered endpoint never went through the configuration's check.
        do {
            _ = try EndpointPolicy.check(endpoint)
        } catch {
            return .permanent(error: "insecure_endpoint", description: error.description)
        }
        var fields: [(String, String)] = [("grant_type", "refresh_token"), ("refresh_token", refreshToken.value)]
        if let scope = settings.scope { fields.append(("scope", scope)) }
        var request = HTTPClientRequest(url: endpoint)
        request.method = .POST
        request.headers.add(name: "Accept", value: "application/json")
        request.headers.add(name: "Content-Type", value: "application/x-www-form-urlencoded")
        request.headers.add(name: "User-Agent", value: "tokend")
        Self.authenticate(&request, fields: &fields, settings: settings)
        let client = pool.client(caFile: settings.caFile)
        do {
            let response = try await client.execute(request, timeout: .milliseconds(pool.timeouts.request.milliseconds))
            let body = try await response.body.collect(upTo: Self.maximumResponseBytes)
            return GrantOutcome.classify(
                status: Int(response.status.code),
                retryAfterHeader: response.headers.first(name: "Retry-After"),
                body: Array(buffer: body),
                now: now()
            )
        } catch {
            return .transient(reason: Self.describe(error), retryAfter: nil)
        }
    }

    /// Revokes a token (RFC 7009). Returns nil on success, else a token-free reason.
    public func revoke(endpoint: String, settings: OAuth2Settings, token: SecretString, tokenTypeHint: String) async -> String? {
        do {
            _ = try EndpointPolicy.check(endpoint)
        } catch {
            return error.description
        }
        var fields: [(String, String)] = [("token", token.value), ("token_type_hint", tokenTypeHint)]
        var request = HTTPClientRequest(url: endpoint)
        request.method = .POST
        request.headers.add(name: "Content-Type", value: "application/x-www-form-urlencoded")
        request.headers.add(name: "User-Agent", value: "tokend")
        Self.authenticate(&request, fields: &fields, settings: settings)
        do {
            let response = try await pool.client(caFile: settings.caFile).execute(request, timeout: .milliseconds(pool.timeouts.request.milliseconds))
            _ = try await response.body.collect(upTo: Self.maximumResponseBytes)
            // RFC 7009 §2.2: 200 also for tokens that were already invalid.
            return response.status == .ok ? nil : "the revocation endpoint answered \(response.status.code)"
        } catch {
            return Self.describe(error)
        }
    }

    /// Adds client authentication (RFC 6749 §2.3) and the form body to `request`.
    static func authenticate(_ request: inout HTTPClientRequest, fields: inout [(String, String)], settings: OAuth2Settings) {
        switch settings.clientAuthentication {
        case .none:
            fields.append(("client_id", settings.clientID))
        case .clientSecretBasic:
            request.headers.add(name: "Authorization", value: FormEncoding.basicAuthorization(clientID: settings.clientID, secret: settings.clientSecret?.value ?? ""))
        case .clientSecretPost:
            fields.append(("client_id", settings.clientID))
            fields.append(("client_secret", settings.clientSecret?.value ?? ""))
        }
        request.body = .bytes(ByteBuffer(string: FormEncoding.encode(fields)))
    }

    /// A short, token-free description of a transport error (TLS failures name themselves).
    static func describe(_ error: any Error) -> String {
        let text = String(describing: error)
        if text.contains("handshakeFailed") || text.contains("CERTIFICATE_VERIFY_FAILED") || text.contains("NIOSSL") {
            return "TLS handshake with the token endpoint failed (certificate not trusted?): \(text.prefix(200))"
        }
        if let httpError = error as? HTTPClientError {
            if httpError == .deadlineExceeded || httpError == .readTimeout { return "the token endpoint did not answer in time" }
            if httpError == .connectTimeout { return "connecting to the token endpoint timed out" }
            if httpError == .remoteConnectionClosed { return "the token endpoint closed the connection" }
        }
        return "cannot reach the token endpoint: \(text.prefix(200))"
    }
}

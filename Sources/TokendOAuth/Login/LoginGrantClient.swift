import AsyncHTTPClient
import NIOCore
import TokendConfig
import TokendCore

/// The HTTP requests of a login: device authorization (RFC 8628 §3.1), the device code grant
/// (§3.4) and the authorization code grant with its PKCE verifier (RFC 6749 §4.1.3, RFC 7636
/// §4.5). Like ``TokenEndpointClient``, it never follows redirects and never puts a token in
/// an error.
public struct LoginGrantClient: Sendable {
    public let pool: HTTPClientPool

    public init(pool: HTTPClientPool) { self.pool = pool }

    /// Asks for a device code and user code.
    /// - Throws: ``LoginError``.
    public func authorizeDevice(endpoint: String, settings: OAuth2Settings) async throws(LoginError) -> DeviceAuthorization {
        var fields: [(String, String)] = []
        if let scope = settings.scope { fields.append(("scope", scope)) }
        let (status, body) = try await post(endpoint, fields: fields, settings: settings, what: "the device authorization endpoint")
        guard status == 200 else {
            if let error = TokenErrorResponse.parse(body) {
                let detail = error.errorDescription.map { ": \($0)" } ?? ""
                throw LoginError("the device authorization endpoint refused the request (\(error.error))\(detail)", oauthError: error.error)
            }
            throw LoginError("the device authorization endpoint answered \(status)")
        }
        return try DeviceAuthorization.parse(body)
    }

    /// One poll of the token endpoint with the device code. Transport failures come back as
    /// `nil` (the caller backs off and polls again).
    /// - Parameter dpopKey: The key the tokens are to be bound to (RFC 9449 §5).
    public func pollDevice(
        endpoint: String, settings: OAuth2Settings, deviceCode: SecretString, dpopKey: DPoPKey? = nil
    ) async -> (status: Int, body: [UInt8])? {
        let fields = [("grant_type", "urn:ietf:params:oauth:grant-type:device_code"), ("device_code", deviceCode.value)]
        return try? await post(endpoint, fields: fields, settings: settings, what: "the token endpoint", dpopKey: dpopKey)
    }

    /// Exchanges an authorization code for tokens.
    /// - Throws: ``LoginError``.
    public func exchangeCode(
        endpoint: String, settings: OAuth2Settings, code: String, redirectURI: String, verifier: SecretString, dpopKey: DPoPKey? = nil
    ) async throws(LoginError) -> TokenResponse {
        let fields = [
            ("grant_type", "authorization_code"), ("code", code), ("redirect_uri", redirectURI), ("code_verifier", verifier.value),
        ]
        let (status, body) = try await post(endpoint, fields: fields, settings: settings, what: "the token endpoint", dpopKey: dpopKey)
        guard status == 200 else {
            if let error = TokenErrorResponse.parse(body) {
                let detail = error.errorDescription.map { ": \($0)" } ?? ""
                throw LoginError("the token endpoint refused the authorization code (\(error.error))\(detail)", oauthError: error.error)
            }
            throw LoginError("the token endpoint answered \(status) to the authorization code")
        }
        do {
            return try TokenResponse.parse(body)
        } catch {
            throw LoginError("the token endpoint's answer is not usable: \(error)")
        }
    }

    /// POSTs a form with the client's authentication; status and body back.
    func post(
        _ endpoint: String, fields: [(String, String)], settings: OAuth2Settings, what: String, dpopKey: DPoPKey? = nil
    ) async throws(LoginError) -> (Int, [UInt8]) {
        do {
            _ = try EndpointPolicy.check(endpoint)
        } catch {
            throw LoginError(error.description)
        }
        // Public clients send client_id in the form, confidential ones authenticate (RFC 6749 §2.3).
        do {
            let response = try await TokenEndpointClient.postForm(
                endpoint, fields: fields, settings: settings, pool: pool, dpopKey: dpopKey)
            return (response.status, response.body)
        } catch let problem as DPoPKey.Problem {
            throw LoginError(problem.description)
        } catch let problem as ClientAssertionSigner.KeyProblem {
            throw LoginError(problem.description)
        } catch {
            throw LoginError("\(what) could not be reached: \(TokenEndpointClient.describe(error))")
        }
    }
}

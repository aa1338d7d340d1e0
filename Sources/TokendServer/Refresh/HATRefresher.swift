import AsyncHTTPClient
import NIOCore
import TokendConfig
import TokendCore
import TokendOAuth

/// HAT PDA providers: a renewal is an authenticated call whose response carries a renewed token.
///
/// tokend calls the configured cheap endpoint (default `GET /users/access_token/validate`) with
/// the current token in the configured header (default `X-Auth-Token`) and takes the renewed
/// token from the same header of the response. The renewed token is verified like an enrolled
/// one; its `exp` is taken as it is (a PDA never moves it), its `iat` moves.
struct HATRefresher: ProviderRefresher {
    let settings: HATSettings
    let verifier: HATTokenVerifier
    let pool: HTTPClientPool

    /// The largest response body read (and thrown away) so the connection can be reused.
    static let maximumBodyBytes = 1 << 20

    func refresh(
        _ credential: Credential, narrowing: TokenNarrowing?, stormPacing: Duration, now: @escaping @Sendable () -> Timestamp
    ) async -> GrantOutcome {
        var request = HTTPClientRequest(url: settings.renewalURL)
        request.headers.add(name: settings.renewalHeader, value: credential.accessToken.value)
        request.headers.add(name: "Accept", value: "application/json")
        request.headers.add(name: "User-Agent", value: "tokend")
        let renewed: String?
        let status: Int
        let retryAfter: String?
        pool.pacer?.requestStarted(pacing: stormPacing)
        defer { pool.pacer?.requestFinished(pacing: stormPacing) }
        do {
            let response = try await pool.client(for: settings.renewalURL, caFile: settings.caFile, proxy: settings.proxy).execute(
                request, timeout: .milliseconds(pool.timeouts.request.milliseconds))
            status = Int(response.status.code)
            retryAfter = response.headers.first(name: "Retry-After")
            renewed = response.headers.first(name: settings.renewalHeader)
            _ = try? await response.body.collect(upTo: Self.maximumBodyBytes)
        } catch {
            return .transient(reason: "the PDA's renewal endpoint could not be reached: \(Self.describe(error))", retryAfter: nil)
        }
        if let failure = Self.classify(status: status, retryAfterHeader: retryAfter, now: now()) { return failure }
        guard let renewed, !renewed.isEmpty else {
            return .transient(reason: "the PDA answered \(status) without a renewed token in \(settings.renewalHeader)", retryAfter: nil)
        }
        let verified: VerifiedHATToken
        do {
            verified = try await verifier.verify(renewed, now: now())
        } catch {
            // The current token is still good; a bad answer is retried with backoff until its deadline.
            return .transient(reason: "the PDA's renewed token was refused: \(error)", retryAfter: nil)
        }
        guard verified.issuedAt > credential.issuedAt else {
            // An unchanged iat would plan the next renewal in the past, again and again.
            return .transient(reason: "the PDA answered with a token that was not renewed (its iat did not move)", retryAfter: nil)
        }
        return .success(TokenResponse(accessToken: SecretString(renewed), tokenType: credential.tokenType))
    }

    /// A PDA has no revocation endpoint.
    func revoke(_ credential: Credential) async -> RevocationOutcome { .unsupported }

    /// What the renewal endpoint's status means: 2xx → `nil`, carry on (the header decides);
    /// 401/403 → the PDA no longer accepts the token (a new login is needed); 429/5xx and
    /// everything else → try again later. Pure.
    static func classify(status: Int, retryAfterHeader: String?, now: Timestamp) -> GrantOutcome? {
        switch status {
        case 200...299:
            return nil
        case 401, 403:
            return .permanent(
                error: "token_rejected", description: "the PDA answered \(status): it no longer accepts the token; log in again")
        default:
            let retryAfter = retryAfterHeader.flatMap { RetryAfter.parse($0, now: now) }
            return .transient(reason: "the PDA's renewal endpoint answered \(status)", retryAfter: retryAfter)
        }
    }

    static func describe(_ error: any Error) -> String {
        if let httpError = error as? HTTPClientError {
            if httpError == .deadlineExceeded || httpError == .readTimeout { return "no answer in time" }
            if httpError == .connectTimeout { return "connecting timed out" }
            if httpError == .remoteConnectionClosed { return "the connection was closed" }
        }
        return String(String(describing: error).prefix(200))
    }
}

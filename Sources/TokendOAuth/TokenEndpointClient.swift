import AsyncHTTPClient
import Logging
import NIOCore
import NIOHTTP1
import Synchronization
import TokendConfig
import TokendCore

/// Talks to OAuth 2.0 token and revocation endpoints. The only place refresh tokens leave
/// tokend over the network.
public struct TokenEndpointClient: Sendable {
    public let pool: HTTPClientPool
    /// Responses larger than this are not token responses; reading stops there.
    public static let maximumResponseBytes = 256 * 1024

    public init(pool: HTTPClientPool) { self.pool = pool }

    /// Runs the RFC 6749 §6 refresh grant over ``FormPostClient``. Never throws: network
    /// failures, timeouts and odd responses come back as `.transient` — or `.unanswered` when
    /// the request went out and no answer came back — so the caller has one thing to handle.
    ///
    /// - Parameters:
    ///   - stormPacing: Nonzero for a grant of a refresh storm, which nobody waits for: the
    ///     interval at which the pool's ``StormPacer`` lets its loop handle I/O meanwhile.
    ///   - dpopKey: The credential's DPoP key: the grant carries a proof of it (RFC 9449 §5),
    ///     with the server's nonce when it demands one.
    ///   - narrowing: Asks for a token narrowed to a scope (RFC 6749 §6, instead of the
    ///     provider's configured `scope`) and a resource (RFC 8707).
    public func refresh(
        endpoint: String,
        settings: OAuth2Settings,
        refreshToken: SecretString,
        dpopKey: DPoPKey? = nil,
        narrowing: TokenNarrowing? = nil,
        stormPacing: Duration = .zero,
        now: @Sendable () -> Timestamp
    ) async -> GrantOutcome {
        // Checked again here: a discovered endpoint never went through the configuration's check.
        do {
            try Self.checkEndpoint(endpoint)
        } catch {
            return .permanent(error: "insecure_endpoint", description: error.description)
        }
        var grant: [(String, String)] = [("grant_type", "refresh_token"), ("refresh_token", refreshToken.value)]
        if let narrowing {
            if let scope = narrowing.scope { grant.append(("scope", scope)) }
            if let resource = narrowing.resource { grant.append(("resource", resource)) }
        } else if let scope = settings.scope {
            grant.append(("scope", scope))
        }
        let plainHeaders = [
            ("Accept", "application/json"), ("Content-Type", "application/x-www-form-urlencoded"), ("User-Agent", "tokend"),
        ]
        pool.pacer?.requestStarted(pacing: stormPacing)
        defer { pool.pacer?.requestFinished(pacing: stormPacing) }
        let deadline = NIODeadline.now() + .milliseconds(pool.timeouts.request.milliseconds)
        do {
            let (response, retried) = try await pool.dpopNonces.send(to: endpoint, key: dpopKey, now: now) {
                (proof) throws(FormPostFailure) in
                // Authenticated per attempt: a client assertion is good for one request (its
                // jti), so a retry with a server's nonce gets a new one.
                var fields = grant
                var headers = plainHeaders
                do throws(ClientAssertionSigner.KeyProblem) {
                    if let authorization = try Self.authenticate(fields: &fields, settings: settings, endpoint: endpoint, now: now()) {
                        headers.append(("Authorization", authorization))
                    }
                } catch {
                    throw FormPostFailure(kind: .other, requestSent: false, detail: error.description)
                }
                if let proof { headers.append(("DPoP", proof)) }
                return try await pool.formPosts.post(
                    url: endpoint, headers: headers, body: FormEncoding.encode(fields), caFile: settings.caFile,
                    proxy: settings.proxy, identity: settings.tlsClientIdentity, maximumBodyBytes: Self.maximumResponseBytes,
                    deadline: deadline)
            }
            if dpopKey != nil, response.demandsDPoPNonce {
                return .transient(reason: retried ? Self.nonceDemandedTwice : Self.nonceDemandedWithoutOne, retryAfter: nil)
            }
            return GrantOutcome.classify(status: response.status, retryAfterHeader: response.retryAfter, body: response.body, now: now())
        } catch {
            switch error.kind {
            case .proof(let problem):
                return .transient(reason: problem.description, retryAfter: nil)
            case .transport(let failure):
                // Whether the request went out decides if the provider may have rotated the token.
                return failure.requestSent
                    ? .unanswered(reason: failure.description) : .transient(reason: failure.description, retryAfter: nil)
            }
        }
    }

    /// The reason given when a server refuses a proof made with its own new nonce as well.
    static let nonceDemandedTwice = "the token endpoint demanded a new DPoP nonce twice in a row (use_dpop_nonce)"
    /// The reason given when a server demands a nonce but sends none tokend can use.
    static let nonceDemandedWithoutOne =
        "the token endpoint demanded a DPoP nonce (use_dpop_nonce) without a usable DPoP-Nonce header"

    /// Endpoints that passed ``EndpointPolicy/check(_:)``: a provider's token endpoint is the
    /// same string for every grant, and parsing it each time was ~1.5 % of a refresh storm's CPU.
    /// Only approvals are kept, at most a few dozen (providers and their discovered endpoints).
    private static let approvedEndpoints = Mutex<Set<String>>([])

    /// ``EndpointPolicy/check(_:)``, remembered for endpoints that pass.
    static func checkEndpoint(_ endpoint: String) throws(EndpointPolicy.Violation) {
        if approvedEndpoints.withLock({ $0.contains(endpoint) }) { return }
        _ = try EndpointPolicy.check(endpoint)
        approvedEndpoints.withLock { approved in
            if approved.count >= 64 { approved.removeAll() }
            approved.insert(endpoint)
        }
    }

    /// Revokes a token (RFC 7009). Returns nil on success, else a token-free reason.
    public func revoke(endpoint: String, settings: OAuth2Settings, token: SecretString, tokenTypeHint: String) async -> String? {
        do {
            _ = try EndpointPolicy.check(endpoint)
        } catch {
            return error.description
        }
        let fields: [(String, String)] = [("token", token.value), ("token_type_hint", tokenTypeHint)]
        do {
            let response = try await Self.postForm(endpoint, fields: fields, settings: settings, pool: pool, acceptJSON: false)
            // RFC 7009 §2.2: 200 also for tokens that were already invalid.
            return response.status == 200 ? nil : "the revocation endpoint answered \(response.status)"
        } catch {
            return Self.describe(error)
        }
    }

    /// A whole response from ``postForm(_:fields:settings:pool:acceptJSON:dpopKey:)``.
    struct FormResponse: Sendable, DPoPAnswer {
        var status: Int
        var retryAfter: String?
        var dpopNonce: String?
        var body: [UInt8]
    }

    /// POSTs `fields` as a form, with the client's authentication, and returns the whole
    /// response (a body over ``maximumResponseBytes`` is an error). For the login grants and
    /// revocation, through AsyncHTTPClient; refresh grants use ``FormPostClient``.
    ///
    /// - Parameter dpopKey: The DPoP key the tokens are to be bound to: the request carries a
    ///   proof of it, and is sent again once with the server's nonce when it demands one.
    static func postForm(
        _ endpoint: String, fields: [(String, String)], settings: OAuth2Settings, pool: HTTPClientPool, acceptJSON: Bool = true,
        dpopKey: DPoPKey? = nil
    ) async throws -> FormResponse {
        var plainHeaders = HTTPHeaders()
        if acceptJSON { plainHeaders.add(name: "Accept", value: "application/json") }
        plainHeaders.add(name: "Content-Type", value: "application/x-www-form-urlencoded")
        plainHeaders.add(name: "User-Agent", value: "tokend")
        let client = pool.client(for: endpoint, caFile: settings.caFile, proxy: settings.proxy, identity: settings.tlsClientIdentity)
        let deadline = NIODeadline.now() + .milliseconds(pool.timeouts.request.milliseconds)
        do {
            return try await pool.dpopNonces.send(to: endpoint, key: dpopKey, now: WallClock.now) { (proof) throws(any Error) in
                // Authenticated per attempt (a client assertion is good for one request).
                var form = fields
                var headers = plainHeaders
                if let authorization = try authenticate(fields: &form, settings: settings, endpoint: endpoint, now: WallClock.now()) {
                    headers.add(name: "Authorization", value: authorization)
                }
                if let proof { headers.add(name: "DPoP", value: proof) }
                let request = try HTTPClient.Request(
                    url: endpoint, method: .POST, headers: headers, body: .byteBuffer(ByteBuffer(string: FormEncoding.encode(form))))
                let accumulator = ResponseAccumulator(request: request, maxBodySize: maximumResponseBytes)
                let response = try await client.execute(request: request, delegate: accumulator, deadline: deadline).futureResult.get()
                return FormResponse(
                    status: Int(response.status.code), retryAfter: response.headers.first(name: "Retry-After"),
                    dpopNonce: response.headers.first(name: "DPoP-Nonce"), body: response.body.map { Array(buffer: $0) } ?? []
                )
            }.answer
        } catch {
            switch error.kind {
            case .proof(let problem): throw problem
            case .transport(let failure): throw failure
            }
        }
    }

    /// Client authentication (RFC 6749 §2.3): adds `client_id` (and `client_secret`, or a
    /// signed client assertion) to the form fields, or returns the value of a Basic
    /// `Authorization` header.
    ///
    /// - Parameter endpoint: where the request goes, the default audience of a client
    ///   assertion (``ClientAssertionAudience``).
    /// - Throws: ``ClientAssertionSigner/KeyProblem`` when the assertion cannot be signed;
    ///   nothing has been sent then.
    static func authenticate(
        fields: inout [(String, String)], settings: OAuth2Settings, endpoint: String, now: Timestamp
    ) throws(ClientAssertionSigner.KeyProblem) -> String? {
        switch settings.clientAuthentication {
        case .tlsClientAuth, .selfSignedTLSClientAuth:
            // The TLS certificate authenticates; the form names the client (RFC 8705 §2).
            fields.append(("client_id", settings.clientID))
            return nil
        case .privateKeyJWT:
            guard let key = settings.clientAssertionKey else { throw .init(description: "no client assertion key is configured") }
            let assertion = try ClientAssertionSigner(key).assertion(
                clientID: settings.clientID, audience: settings.clientAssertionAudience(endpoint: endpoint), now: now)
            fields.append(("client_id", settings.clientID))
            fields.append(("client_assertion_type", "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"))
            fields.append(("client_assertion", assertion))
            return nil
        case .none:
            fields.append(("client_id", settings.clientID))
            return nil
        case .clientSecretBasic:
            return FormEncoding.basicAuthorization(clientID: settings.clientID, secret: settings.clientSecret?.value ?? "")
        case .clientSecretPost:
            fields.append(("client_id", settings.clientID))
            fields.append(("client_secret", settings.clientSecret?.value ?? ""))
            return nil
        }
    }

    /// A short, token-free description of a transport error (TLS failures name themselves).
    static func describe(_ error: any Error) -> String {
        let text = String(describing: error)
        if text.contains("handshakeFailed") || text.contains("CERTIFICATE_VERIFY_FAILED") || text.contains("NIOSSL") {
            return "TLS handshake with the token endpoint failed (certificate not trusted?): \(text.prefix(200))"
        }
        if error is ResponseAccumulator.ResponseTooBigError {
            return "the token endpoint's answer is larger than \(maximumResponseBytes / 1024) KiB"
        }
        if let httpError = error as? HTTPClientError {
            if httpError == .deadlineExceeded || httpError == .readTimeout { return "the token endpoint did not answer in time" }
            if httpError == .connectTimeout { return "connecting to the token endpoint timed out" }
            if httpError == .remoteConnectionClosed { return "the token endpoint closed the connection" }
        }
        return "cannot reach the token endpoint: \(text.prefix(200))"
    }
}

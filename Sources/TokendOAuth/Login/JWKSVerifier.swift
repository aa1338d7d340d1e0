import AsyncHTTPClient
import JWTKit
import NIOCore
import TokendCore
import TokendJSON

/// Verifies JWTs from an OpenID Connect issuer against its JWKS, with jwt-kit.
///
/// The key set is fetched on first use and kept. A token naming a key id the set does not
/// have makes it fetch the set again (the issuer rotated its keys), at most once per
/// `minimumRefetchInterval`, so tokens with made-up key ids cannot make tokend hammer the
/// issuer.
public actor JWKSVerifier {
    public let jwksURI: String
    let caFile: String?
    let proxy: ProxySetting
    let pool: HTTPClientPool
    let minimumRefetchInterval: Duration
    private var keys: JWTKeyCollection?
    /// Key id → the key's declared `alg`, if it declares one.
    private var algorithms: [String: String?] = [:]
    /// When an unknown key id last made the set be fetched again (the first fetch is free).
    private var lastRefetch: ContinuousClock.Instant?
    /// How often the key set was fetched (for tests and logs).
    public private(set) var fetchCount = 0

    public init(
        jwksURI: String, caFile: String?, proxy: ProxySetting = .environment, pool: HTTPClientPool,
        minimumRefetchInterval: Duration = .seconds(60)
    ) {
        self.jwksURI = jwksURI
        self.caFile = caFile
        self.proxy = proxy
        self.pool = pool
        self.minimumRefetchInterval = minimumRefetchInterval
    }

    /// Verifies `token`'s signature and then its claims.
    /// - Returns: the verified claims.
    /// - Throws: ``LoginError`` naming what failed; never the token.
    public func verify(_ token: String, expectations: JWTExpectations, now: Timestamp) async throws(LoginError) -> JSONObject {
        let what = expectations.what
        guard let jwt = DecodedJWT(token) else { throw LoginError("the \(what) is not a signed JWT") }
        try expectations.checkAlgorithm(jwt)
        if keys == nil {
            try await fetch()
        } else if let kid = jwt.keyID, algorithms[kid] == nil, mayRefetch() {
            // The issuer may have rotated its keys since the set was fetched.
            lastRefetch = .now
            try await fetch()
        }
        guard let keys else { throw LoginError("the issuer's key set is not available") }
        if let kid = jwt.keyID {
            guard let declared = algorithms[kid] else {
                throw LoginError(
                    "the \(what) is signed with key \(AuthorizationRedirect.printable(kid)), which the issuer's key set does not have")
            }
            if let declared, declared != jwt.algorithm {
                throw LoginError("the \(what)'s alg does not match the issuer's key \(AuthorizationRedirect.printable(kid))")
            }
        } else if algorithms.count != 1 {
            throw LoginError("the \(what) names no key id and the issuer has several keys")
        }
        do {
            _ = try await keys.verify(token, as: OIDCSignatureOnly.self)
        } catch {
            throw LoginError("the \(what)'s signature does not verify against the issuer's keys")
        }
        try expectations.checkClaims(jwt.claims, now: now)
        return jwt.claims
    }

    private func mayRefetch() -> Bool {
        guard let lastRefetch else { return true }
        return ContinuousClock.now - lastRefetch >= minimumRefetchInterval
    }

    private func fetch() async throws(LoginError) {
        fetchCount += 1
        do {
            _ = try EndpointPolicy.check(jwksURI)
        } catch {
            throw LoginError("jwks_uri: \(error.description)")
        }
        let body: [UInt8]
        do {
            let response = try await pool.client(for: jwksURI, caFile: caFile, proxy: proxy).execute(
                HTTPClientRequest(url: jwksURI), timeout: .milliseconds(pool.timeouts.request.milliseconds))
            guard response.status == .ok else { throw LoginError("the issuer's key set (\(jwksURI)) answered \(response.status.code)") }
            body = Array(buffer: try await response.body.collect(upTo: 1 << 20))
        } catch let error as LoginError {
            throw error
        } catch {
            throw LoginError("cannot fetch the issuer's key set (\(jwksURI)): \(TokenEndpointClient.describe(error))")
        }
        guard case .object(let set)? = try? JSONParser.parse(body), let list = set["keys"]?.arrayValue else {
            throw LoginError("the issuer's key set is not a JWKS")
        }
        let collection = JWTKeyCollection()
        var found: [String: String?] = [:]
        for key in list {
            // Keys tokend cannot use (symmetric, unknown types, no kid) are skipped, not fatal.
            guard case .object(let object) = key, let kid = object["kid"]?.stringValue, object["kty"]?.stringValue != "oct" else {
                continue
            }
            let single = JSONWriter.string(.object(["keys": .array([key])]))
            do {
                _ = try await collection.add(jwksJSON: single)
                found[kid] = object["alg"]?.stringValue
            } catch {
                continue
            }
        }
        guard !found.isEmpty else { throw LoginError("the issuer's key set has no usable key") }
        keys = collection
        algorithms = found
    }
}

/// A payload that decodes anything: jwt-kit checks the signature, tokend's own
/// ``JWTExpectations`` check the claims (with the time passed in).
struct OIDCSignatureOnly: JWTPayload {
    init(from decoder: any Decoder) throws {}
    func encode(to encoder: any Encoder) throws {}
    func verify(using algorithm: some JWTAlgorithm) async throws {}
}

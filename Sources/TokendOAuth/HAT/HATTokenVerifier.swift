import AsyncHTTPClient
import JWTKit
import NIOCore
import TokendConfig
import TokendCore

/// What a verified HAT token says about itself.
public struct VerifiedHATToken: Sendable, Hashable {
    public var issuedAt: Timestamp
    public var expiresAt: Timestamp
    public var subject: String?
}

/// Why a HAT token was not accepted. Messages never contain the token.
public enum HATVerificationError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The header or the claims are wrong (`alg`, `iss`, `application`, `exp`, structure).
    case claims(HATClaimError)
    /// The RS256 signature does not verify against the PDA's public key (also after re-fetching it).
    case badSignature
    /// The public key could not be fetched; worth retrying later.
    case keyUnavailable(String)
    /// The PDA served something that is not an RSA `PUBLIC KEY` in PEM.
    case invalidKey(String)

    /// Whether a later attempt may succeed without anything changing at the caller.
    public var isTransient: Bool {
        if case .keyUnavailable = self { return true }
        return false
    }

    public var description: String {
        switch self {
        case .claims(let error): error.description
        case .badSignature: "the token's RS256 signature does not verify against the PDA's public key"
        case .keyUnavailable(let reason): reason
        case .invalidKey(let reason): reason
        }
    }
}

/// Verifies HAT PDA tokens: the pure header and claim checks of `HATTokenClaims`, then the RS256
/// signature against the PDA's public key (`/publickey`, a PEM `PUBLIC KEY`).
///
/// The key is fetched on first use and cached. When a signature fails against the cached key,
/// the key is fetched again (the PDA may have rotated it) — at most once per
/// `keyRefetchInterval`, so a stream of forged tokens cannot make tokend hammer the PDA.
public actor HATTokenVerifier {
    public let settings: HATSettings
    let pool: HTTPClientPool
    private var key: CachedKey?
    private var lastFetch: ContinuousClock.Instant?
    private var fetching: Task<Result<CachedKey, HATVerificationError>, Never>?
    /// How many times the key was fetched (for tests and metrics).
    public private(set) var keyFetches = 0

    /// The largest `/publickey` body read.
    static let maximumKeyBytes = 64 * 1024

    private struct CachedKey: Sendable {
        var pem: String
        var keys: JWTKeyCollection
    }

    public init(settings: HATSettings, pool: HTTPClientPool) {
        self.settings = settings
        self.pool = pool
    }

    /// Checks `token` completely.
    /// - Parameters:
    ///   - token: the compact JWS from the PDA.
    ///   - now: the current time, for `exp`.
    /// - Returns: its times and subject.
    /// - Throws: `HATVerificationError`; `.keyUnavailable` is transient, everything else is final.
    public func verify(_ token: String, now: Timestamp) async throws(HATVerificationError) -> VerifiedHATToken {
        let claims: HATTokenClaims
        do {
            claims = try HATTokenClaims.check(token, address: settings.address, application: settings.application, now: now)
        } catch {
            throw .claims(error)
        }
        let cached: CachedKey
        if let key {
            cached = key
        } else {
            cached = try await fetchKey()
        }
        if await signatureVerifies(token, with: cached) { return verified(claims) }
        // The PDA may have a new key; fetch it again unless that was done just now.
        if let lastFetch, ContinuousClock.now - lastFetch < settings.keyRefetchInterval { throw .badSignature }
        let fresh = try await fetchKey()
        guard fresh.pem != cached.pem, await signatureVerifies(token, with: fresh) else { throw .badSignature }
        return verified(claims)
    }

    private func verified(_ claims: HATTokenClaims) -> VerifiedHATToken {
        VerifiedHATToken(issuedAt: claims.issuedAt, expiresAt: claims.expiresAt, subject: claims.subject)
    }

    private func signatureVerifies(_ token: String, with key: CachedKey) async -> Bool {
        do {
            _ = try await key.keys.verify(token, as: SignatureOnly.self)
            return true
        } catch {
            return false
        }
    }

    /// Fetches the key; callers that arrive while a fetch runs share it.
    private func fetchKey() async throws(HATVerificationError) -> CachedKey {
        let task: Task<Result<CachedKey, HATVerificationError>, Never>
        if let fetching {
            task = fetching
        } else {
            lastFetch = ContinuousClock.now
            keyFetches += 1
            let url = settings.publicKeyURL
            let client = pool.client(for: url, caFile: settings.caFile, proxy: settings.proxy)
            let timeout = pool.timeouts.request
            task = Task { await Self.download(url: url, client: client, timeout: timeout) }
            fetching = task
        }
        let result = await task.value
        if fetching == task { fetching = nil }
        switch result {
        case .success(let fresh):
            key = fresh
            return fresh
        case .failure(let error):
            throw error
        }
    }

    private static func download(url: String, client: HTTPClient, timeout: Duration) async -> Result<CachedKey, HATVerificationError> {
        let body: ByteBuffer
        do {
            var request = HTTPClientRequest(url: url)
            request.headers.add(name: "User-Agent", value: "tokend")
            let response = try await client.execute(request, timeout: .milliseconds(timeout.milliseconds))
            guard response.status == .ok else {
                return .failure(.keyUnavailable("the PDA's public key could not be fetched: \(url) answered \(response.status.code)"))
            }
            body = try await response.body.collect(upTo: maximumKeyBytes)
        } catch {
            return .failure(
                .keyUnavailable("the PDA's public key could not be fetched from \(url): \(String(describing: error).prefix(200))"))
        }
        let pem = String(decoding: body.readableBytesView, as: UTF8.self).trimmingWhitespace()
        guard pem.hasPrefix("-----BEGIN PUBLIC KEY-----") || pem.hasPrefix("-----BEGIN RSA PUBLIC KEY-----") else {
            return .failure(.invalidKey("\(url) did not serve a PEM PUBLIC KEY"))
        }
        do {
            let publicKey = try Insecure.RSA.PublicKey(pem: pem)
            let keys = JWTKeyCollection()
            await keys.add(rsa: publicKey, digestAlgorithm: .sha256)
            return .success(CachedKey(pem: pem, keys: keys))
        } catch {
            return .failure(.invalidKey("\(url) served a key that is not a usable RSA public key (2048 bits or more): \(error)"))
        }
    }
}

/// The payload as jwt-kit sees it: nothing. The claims were read and checked by `HATTokenClaims`
/// before; jwt-kit only checks the signature.
private struct SignatureOnly: JWTPayload {
    func verify(using algorithm: some JWTAlgorithm) async throws {}
}

extension String {
    fileprivate func trimmingWhitespace() -> String {
        var scalars = Substring(self).unicodeScalars
        while let first = scalars.first, first.properties.isWhitespace { scalars.removeFirst() }
        while let last = scalars.last, last.properties.isWhitespace { scalars.removeLast() }
        return String(scalars)
    }
}

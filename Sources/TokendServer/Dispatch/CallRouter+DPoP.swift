import NIOCore
import Synchronization
import TokendCore
import TokendJSON
import TokendOAuth
import TokendProtocol
import TokendStorage

extension CallRouter {
    /// `ProvideDPoPProof`: the current DPoP-bound token and a proof for one request with it.
    ///
    /// Authorised and served like `ProvideTokenReplacement`. With the credential's key in
    /// memory and a token that is valid long enough, the proof is signed on the event loop
    /// (one P-256 signature); otherwise the call waits for the key to be read from the store
    /// and, if needed, for a refresh.
    func provideDPoPProof(_ call: VarlinkCall, caller: CallerIdentity, eventLoop: any EventLoop) throws(VarlinkError) -> CallOutcome {
        let parameters = ParameterReader(call.parameters)
        let user = try parameters.string("userIdentifier")
        let (method, uri) = (try parameters.string("httpMethod"), try parameters.string("httpUri"))
        let target: DPoPTarget
        do {
            target = try DPoPTarget(method: method, uri: uri)
        } catch {
            throw .invalidParameter(error.parameter)
        }
        let nonce = try parameters.optionalString("nonce")
        if let nonce, !DPoPNonce.isValid(nonce) { throw .invalidParameter("nonce") }
        let minValidSeconds = try parameters.optionalInt("minValidSeconds") ?? 0
        guard minValidSeconds >= 0, minValidSeconds <= 366 * 86400 else { throw .invalidParameter("minValidSeconds") }

        let entry = try readableEntry(user, caller: caller, method: call.method)
        guard entry.isDPoPBound else {
            throw .invalidCredential(
                "the tokens of '\(user)' are \(entry.tokenType) tokens, not DPoP-bound: present them as they are, without a proof")
        }
        let now = now()
        let decision = ServeDecision.decide(deadline: entry.deadline, now: now, minimumValidity: .seconds(minValidSeconds))
        if decision == .serve, let key = dpopKeys.key(of: user, enrolment: entry.enrolment) {
            return .reply(try Self.proofReply(entry, key: key, target: target, nonce: nonce, now: now))
        }
        return deferred(
            on: eventLoop, caller: caller, what: "making a DPoP proof",
            timeoutError: { timeout in
                .refreshFailed(
                    user, reason: "no fresh token within the call timeout (\(DurationFormat.humanReadable(timeout)))", retryAt: nil)
            }
        ) { [registry, dpopKeys, self] in
            var current = entry
            if decision != .serve {
                current = try await registry.freshEntry(
                    for: user, reason: .tooShortLived(minimumValidity: .seconds(minValidSeconds)), caller: caller)
            }
            let key = try await dpopKeys.load(of: user, matching: current, from: registry.store)
            return [try Self.proofReply(current, key: key, target: target, nonce: nonce, now: self.now())]
        }
    }

    /// `{"parameters":{"credentials":{…},"proof":"…"}}`.
    static func proofReply(_ entry: ViewEntry, key: DPoPKey, target: DPoPTarget, nonce: String?, now: Timestamp) throws(VarlinkError)
        -> [UInt8]
    {
        guard let credentials = entry.credentials else {
            throw .storageFailed("the stored access token of '\(entry.userIdentifier)' cannot be read")
        }
        let proof: String
        do {
            proof = try key.proof(for: target, now: now, nonce: nonce, accessToken: SecretString(credentials.accessToken))
        } catch {
            throw .storageFailed(error.description)
        }
        var bytes: [UInt8] = []
        VarlinkReply(parameters: ["credentials": .object(credentials.json), "proof": .string(proof)]).encode(into: &bytes)
        return bytes
    }
}

/// The DPoP keys of the credentials programs ask proofs for, opened from the store once and
/// kept with the enrolment of the credential they belong to. A credential keeps its key across
/// refreshes; a replaced one (a new enrolment) has a new key, which is then read again.
final class DPoPKeyCache: Sendable {
    private let keys = Mutex<[String: (enrolment: Enrolment, key: DPoPKey)]>([:])

    /// At most this many keys are kept; more clear the cache (it refills from the store).
    static let capacity = 10_000

    func key(of user: String, enrolment: Enrolment) -> DPoPKey? {
        keys.withLock { keys in keys[user].flatMap { $0.enrolment == enrolment ? $0.key : nil } }
    }

    /// Reads the key of `user` from the store, for the token of `entry`.
    /// - Throws: `StorageFailed` when it cannot be read, `InvalidCredential` when the stored
    ///   credential has no key, a retryable `RefreshFailed` when it was replaced since `entry`.
    func load(of user: String, matching entry: ViewEntry, from store: any CredentialStore) async throws(VarlinkError) -> DPoPKey {
        if let known = key(of: user, enrolment: entry.enrolment) { return known }
        let stored: Credential?
        do {
            stored = try await store.load(userIdentifier: user)
        } catch {
            throw .storageFailed("the credential's DPoP key could not be read")
        }
        guard let stored else { throw .unknownUser(user) }
        guard let secret = stored.dpopKey else {
            throw .invalidCredential("'\(user)' has no DPoP key: its tokens cannot be presented with a proof")
        }
        let key: DPoPKey
        do {
            key = try DPoPKey(secret)
        } catch {
            throw .storageFailed(error.description)
        }
        // Replaced since the entry was read: the entry's token is bound to the old key.
        guard stored.enrolment == entry.enrolment else {
            throw .refreshFailed(user, reason: "the credential was replaced while its proof was made; ask again", retryAt: nil)
        }
        keys.withLock { keys in
            if keys.count >= Self.capacity { keys.removeAll() }
            keys[user] = (entry.enrolment, key)
        }
        return key
    }
}

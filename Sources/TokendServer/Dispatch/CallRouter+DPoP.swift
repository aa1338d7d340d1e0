import NIOCore
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
        if decision == .serve, let key = view.dpopKeys.key(of: user, enrolment: entry.enrolment) {
            let reply = try Self.proofReply(entry, key: key, target: target, nonce: nonce, now: now)
            audit?.released(entry, to: caller, method: call.method)
            return .reply(reply)
        }
        return deferred(
            on: eventLoop, caller: caller, what: "making a DPoP proof",
            timeoutError: { timeout in
                .refreshFailed(
                    user, reason: "no fresh token within the call timeout (\(DurationFormat.humanReadable(timeout)))", retryAt: nil)
            }
        ) { [registry, view, self] in
            var current = entry
            if decision != .serve {
                current = try await registry.freshEntry(
                    for: user, reason: .tooShortLived(minimumValidity: .seconds(minValidSeconds)), caller: caller)
                // Replaced while the call waited: the caller must be able to read the new one.
                try self.checkStillReadable(current, caller: caller, method: TokenProviderMethod.provideDPoPProof.rawValue)
            }
            let key = try await view.dpopKeys.load(of: user, matching: current, from: registry.store)
            let reply = try Self.proofReply(current, key: key, target: target, nonce: nonce, now: self.now())
            self.audit?.released(current, to: caller, method: TokenProviderMethod.provideDPoPProof.rawValue)
            return [reply]
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

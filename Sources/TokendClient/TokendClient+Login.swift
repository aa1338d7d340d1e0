import TokendJSON
import TokendProtocol

extension TokendClient {
    /// Starts a login that tokend runs itself (device, code or HAT flow).
    ///
    /// The reply says what the user must do; it carries no token, and no token ever will:
    /// tokend stores the result of the login directly.
    /// - Parameter request: who logs in, at which provider, with which flow.
    /// - Returns: the login's id and what to show the user.
    /// - Throws: ``TokendClientError``: `unknownProvider`, `permissionDenied`, `credentialExists`,
    ///   `loginFailed` (the provider refused to start one), …
    public func beginLogin(_ request: BeginLoginRequest) async throws(TokendClientError) -> LoginChallenge {
        let method = TokenProviderMethod.beginLogin.rawValue
        try Self.checkIdentifier(request.userIdentifier, name: "userIdentifier", method: method)
        try Self.checkIdentifier(request.provider, name: "provider", method: method)
        let call = VarlinkCall(method: method, parameters: request.json)
        let reply = try await singleReply(call)
        do {
            return try LoginChallenge(json: reply.parameters)
        } catch {
            throw Self.invalidReply(call, error)
        }
    }

    /// Finishes a login: for the device flow, waits until the user approved or denied it (or
    /// it expired); for the code and HAT flows, hands over the URL the browser was sent back to.
    ///
    /// A device login can take minutes: use a client whose `callTimeout` reaches past the
    /// challenge's `expiresAt`.
    /// - Parameters:
    ///   - loginID: ``LoginChallenge/loginID``.
    ///   - redirectURL: the redirect (code and HAT flows); it is sent to tokend only.
    /// - Returns: the stored credential's status.
    /// - Throws: ``TokendClientError``: `loginFailed` (denied, expired, state mismatch, a token
    ///   that failed verification; see `parameters["oauthError"]`), `unknownLogin`, …
    public func completeLogin(_ loginID: String, redirectURL: String? = nil) async throws(TokendClientError) -> CredentialStatus {
        var parameters: JSONObject = ["loginId": .string(loginID)]
        parameters.setIfPresent("redirectUrl", redirectURL.map(JSONValue.string))
        let call = VarlinkCall(method: TokenProviderMethod.completeLogin.rawValue, parameters: parameters)
        let reply: VarlinkReply
        do {
            reply = try await singleReply(call)
        } catch {
            // The redirect URL may carry a code or token: keep it out of the error.
            var error = error
            if let redirectURL { error.message = Redaction.display(error.message, secrets: [redirectURL]) }
            throw error
        }
        do {
            guard let object = try ParameterReader(reply.parameters).optionalObject("credential") else {
                throw VarlinkError.invalidParameter("credential")
            }
            let status = try CredentialStatus(json: object)
            cache.withLock { $0.remove(status.userIdentifier) }
            return status
        } catch {
            throw Self.invalidReply(call, error)
        }
    }

    /// Abandons a login.
    /// - Throws: ``TokendClientError``: `unknownLogin`, …
    public func cancelLogin(_ loginID: String) async throws(TokendClientError) {
        _ = try await singleReply(VarlinkCall(method: TokenProviderMethod.cancelLogin.rawValue, parameters: ["loginId": .string(loginID)]))
    }
}

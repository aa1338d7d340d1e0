import TokendJSON
import TokendProtocol

/// What `org.varlink.service.GetInfo` says about the daemon.
public struct TokendServiceInfo: Sendable, Hashable {
    public var vendor: String
    public var product: String
    public var version: String
    public var url: String
    /// The interfaces the daemon serves, e.g. `io.tokend.TokenProvider`.
    public var interfaces: [String]

    public init(vendor: String, product: String, version: String, url: String, interfaces: [String]) {
        self.vendor = vendor
        self.product = product
        self.version = version
        self.url = url
        self.interfaces = interfaces
    }
}

/// What `Reload` applied.
public struct ReloadedConfiguration: Sendable, Hashable {
    /// The configuration file in force (nil: the built-in defaults).
    public var file: String?
    /// The providers of the configuration now in force.
    public var providers: [String]
    /// Changed settings that take effect only at the next start, e.g. `daemon.socket`.
    public var restartNeeded: [String]

    public init(file: String?, providers: [String], restartNeeded: [String]) {
        self.file = file
        self.providers = providers
        self.restartNeeded = restartNeeded
    }
}

extension TokendClient {
    /// Returns an access token for `userIdentifier` that stays valid for at least `minValidity`.
    ///
    /// Answered from the in-process cache, without a round trip, while the cached token stays
    /// valid for `minValidity` plus the cache's safety margin (see ``cachePolicy``).
    ///
    /// When an API refuses a token (HTTP 401), call this once with that token as
    /// `rejectedToken`: the cached copy is dropped and the daemon refreshes once before
    /// answering (however many callers report the same token). Do not loop on 401s; a token
    /// that is refused again right after a forced refresh is not going to be fixed by another.
    ///
    /// - Parameters:
    ///   - userIdentifier: whose credential.
    ///   - minValidity: how long the token must still be valid; tokend refreshes first when the
    ///     current one expires sooner. Rounded up to whole seconds.
    ///   - rejectedToken: the token an API just refused. When it is still the current token,
    ///     tokend refreshes before answering (once, however many callers report it); when it is
    ///     already stale, the current token is returned (from the cache, when it holds a newer
    ///     one).
    ///   - scope: a token narrowed to these scope values (space-separated, within the
    ///     credential's scope) instead of the credential's own; its provider must allow
    ///     narrowed tokens (`narrowed_tokens = true`).
    ///   - resource: a token narrowed to this API (an absolute URI, RFC 8707). Narrowed tokens
    ///     are cached by the daemon, not in this process.
    /// - Returns: the credentials; their `userIdentifier` is the one asked for.
    /// - Throws: ``TokendClientError``: `unknownUser`, `permissionDenied`,
    ///   `reauthenticationRequired`, `refreshFailed`, `daemonUnavailable`, `timeout`,
    ///   `cancelled`, `invalidCredential` (a scope wider than the credential's, a provider
    ///   without narrowed tokens), …
    public func credentials(
        for userIdentifier: String,
        minValidity: Duration = .zero,
        rejectedToken: String? = nil,
        scope: String? = nil,
        resource: String? = nil
    ) async throws(TokendClientError) -> Credentials {
        let method = TokenProviderMethod.provideTokenReplacement.rawValue
        try Self.checkIdentifier(userIdentifier, name: "userIdentifier", method: method)
        let seconds = Self.wholeSecondsRoundingUp(minValidity)
        if scope != nil || resource != nil {
            let call = Self.tokenCall(
                userIdentifier, minValiditySeconds: seconds, rejectedToken: rejectedToken, scope: scope, resource: resource)
            return try Self.credentials(in: try await singleReply(call), of: call, for: userIdentifier)
        }
        let now = WallClock.nowSeconds()
        let lookup = cache.withLock { cache in
            cache.lookup(userIdentifier, minValiditySeconds: seconds, rejectedToken: rejectedToken, now: now)
        }
        if case .hit(let credentials) = lookup {
            countCacheHit()
            return credentials
        }
        let call = Self.tokenCall(userIdentifier, minValiditySeconds: seconds, rejectedToken: rejectedToken)
        let reply: VarlinkReply
        do {
            reply = try await singleReply(call)
        } catch {
            // The credential is gone or needs a new login: its cached token must not answer.
            if error.endsCredential { cache.withLock { $0.remove(userIdentifier) } }
            throw error
        }
        let credentials = try Self.credentials(in: reply, of: call, for: userIdentifier)
        cache.withLock { $0.store(credentials, now: WallClock.nowSeconds()) }
        return credentials
    }

    /// The daemon's status and the status of the credentials the caller may see.
    ///
    /// - Parameter userIdentifier: one credential, or `nil` for all of them (asked for with
    ///   `more`; the streamed replies are collected).
    /// - Returns: the daemon's status (when the daemon sends it) and the credentials.
    /// - Throws: ``TokendClientError``, e.g. `unknownUser` for a credential tokend lacks.
    public func status(userIdentifier: String? = nil) async throws(TokendClientError)
        -> (daemon: DaemonStatus?, credentials: [CredentialStatus])
    {
        let method = TokenProviderMethod.status.rawValue
        var call = VarlinkCall(method: method)
        if let userIdentifier {
            try Self.checkIdentifier(userIdentifier, name: "userIdentifier", method: method)
            call.parameters["userIdentifier"] = .string(userIdentifier)
        } else {
            call.more = true
        }
        let replies = try await self.replies(call)
        var daemon: DaemonStatus?
        var credentials: [CredentialStatus] = []
        do {
            for reply in replies {
                let reader = ParameterReader(reply.parameters)
                if daemon == nil, let object = try reader.optionalObject("daemon") {
                    daemon = try DaemonStatus(json: object)
                }
                switch reply.parameters["credentials"] {
                case nil, .null?: break
                case .array(let elements)?:
                    for element in elements {
                        guard let object = element.objectValue else {
                            throw VarlinkError.invalidParameter("credentials")
                        }
                        credentials.append(try CredentialStatus(json: object))
                    }
                default: throw VarlinkError.invalidParameter("credentials")
                }
            }
        } catch {
            throw Self.invalidReply(call, error)
        }
        return (daemon, credentials)
    }

    /// Stores a credential (administrators, or the credential's only reader enrolling itself).
    /// - Parameter request: the token endpoint response and where it belongs.
    /// - Throws: ``TokendClientError``: `credentialExists` (unless `request.replace`),
    ///   `unknownProvider`, `invalidCredential`, `permissionDenied`, `storageFailed`, …
    @discardableResult
    public func addCredential(_ request: AddCredentialRequest) async throws(TokendClientError) -> [String] {
        let method = TokenProviderMethod.addCredential.rawValue
        try Self.checkIdentifier(request.userIdentifier, name: "userIdentifier", method: method)
        try Self.checkIdentifier(request.provider, name: "provider", method: method)
        guard !request.accessToken.isEmpty else {
            throw TokendClientError(code: .invalidParameter, message: "the access token is empty", method: method)
        }
        let call = VarlinkCall(method: method, parameters: request.json)
        let reply = try await singleReply(call)
        cache.withLock { $0.remove(request.userIdentifier) }
        do {
            return try ParameterReader(reply.parameters).optionalStringArray("warnings") ?? []
        } catch {
            throw Self.invalidReply(call, error)
        }
    }

    /// Deletes the credential of `userIdentifier`, revoking its tokens at the provider first
    /// when tokend got them from the provider.
    /// - Parameters:
    ///   - userIdentifier: whose credential.
    ///   - revokeAnyway: revoke tokens that came from `AddCredential` too (administrators only).
    /// - Returns: What happened at the provider (``RemovalResult/revocation``).
    /// - Throws: ``TokendClientError``: `unknownUser`, `permissionDenied`, `storageFailed`, …
    @discardableResult
    public func removeCredential(_ userIdentifier: String, revokeAnyway: Bool = false) async throws(TokendClientError)
        -> RemovalResult
    {
        let method = TokenProviderMethod.removeCredential.rawValue
        try Self.checkIdentifier(userIdentifier, name: "userIdentifier", method: method)
        var parameters: JSONObject = ["userIdentifier": .string(userIdentifier)]
        if revokeAnyway { parameters["revokeAnyway"] = .bool(true) }
        let call = VarlinkCall(method: method, parameters: parameters)
        let reply = try await singleReply(call)
        cache.withLock { $0.remove(userIdentifier) }
        do {
            return try RemovalResult(json: reply.parameters)
        } catch {
            throw Self.invalidReply(call, error)
        }
    }

    /// Re-encrypts every stored token under a newly generated master key (administrators only).
    /// - Returns: the new key's id and how many tokens were re-encrypted.
    /// - Throws: ``TokendClientError``: `keyRotationUnavailable`, `permissionDenied`,
    ///   `storageFailed`, …
    public func rotateKey() async throws(TokendClientError) -> (keyID: String, reencrypted: Int) {
        let call = VarlinkCall(method: TokenProviderMethod.rotateKey.rawValue)
        let reply = try await singleReply(call)
        do {
            let reader = ParameterReader(reply.parameters)
            let count = try reader.int("reencrypted")
            guard let reencrypted = Int(exactly: count), reencrypted >= 0 else {
                throw VarlinkError.invalidParameter("reencrypted")
            }
            return (try reader.string("keyId"), reencrypted)
        } catch {
            throw Self.invalidReply(call, error)
        }
    }

    /// Has the daemon read its configuration file again and apply it (administrators only), and
    /// waits for its verdict.
    /// - Returns: what the daemon applied: the file, its providers and the changed settings that
    ///   take effect only after a restart.
    /// - Throws: ``TokendClientError``: `configurationInvalid` (the message names the key; the
    ///   daemon keeps the configuration it had), `permissionDenied`, …
    public func reload() async throws(TokendClientError) -> ReloadedConfiguration {
        let call = VarlinkCall(method: TokenProviderMethod.reload.rawValue)
        let reply = try await singleReply(call)
        do {
            let reader = ParameterReader(reply.parameters)
            return ReloadedConfiguration(
                file: try reader.optionalString("file"),
                providers: try reader.optionalStringArray("providers") ?? [],
                restartNeeded: try reader.optionalStringArray("restartNeeded") ?? []
            )
        } catch {
            throw Self.invalidReply(call, error)
        }
    }

    /// What the daemon says about itself (`org.varlink.service.GetInfo`).
    /// - Throws: ``TokendClientError``.
    public func getInfo() async throws(TokendClientError) -> TokendServiceInfo {
        let call = VarlinkCall(method: "org.varlink.service.GetInfo")
        let reply = try await singleReply(call)
        do {
            let reader = ParameterReader(reply.parameters)
            return TokendServiceInfo(
                vendor: try reader.string("vendor"),
                product: try reader.string("product"),
                version: try reader.string("version"),
                url: try reader.string("url"),
                interfaces: try reader.optionalStringArray("interfaces") ?? []
            )
        } catch {
            throw Self.invalidReply(call, error)
        }
    }

    /// The Varlink definition of `interface` as the daemon serves it
    /// (`org.varlink.service.GetInterfaceDescription`).
    /// - Parameter interface: e.g. `io.tokend.TokenProvider`.
    /// - Throws: ``TokendClientError``: `methodNotFound` for an interface the daemon lacks, …
    public func interfaceDescription(_ interface: String) async throws(TokendClientError) -> String {
        let call = VarlinkCall(
            method: "org.varlink.service.GetInterfaceDescription",
            parameters: ["interface": .string(interface)]
        )
        let reply = try await singleReply(call)
        do {
            return try ParameterReader(reply.parameters).string("description")
        } catch {
            throw Self.invalidReply(call, error)
        }
    }

    // MARK: Helpers

    /// All replies of `call`, throwing the error reply (which is always the last) if any.
    func replies(_ call: VarlinkCall) async throws(TokendClientError) -> [VarlinkReply] {
        let replies = try await self.call(call)
        if let failed = replies.last, let name = failed.error {
            throw TokendClientError(varlinkErrorName: name, parameters: failed.parameters, call: call)
        }
        guard !replies.isEmpty else {
            throw TokendClientError(
                code: .protocolError,
                message: "tokend sent no reply to \(call.method)",
                method: call.method
            )
        }
        return replies
    }

    /// The one reply of a call made without `more`.
    func singleReply(_ call: VarlinkCall) async throws(TokendClientError) -> VarlinkReply {
        let replies = try await self.replies(call)
        return replies[replies.count - 1]
    }

    static func checkIdentifier(_ value: String, name: String, method: String) throws(TokendClientError) {
        // The value is not echoed: whatever it is, it is not a valid identifier.
        guard Identifier.isValid(value) else {
            throw TokendClientError(
                code: .invalidParameter,
                message: "the \(name) is not valid (1 to 255 printable ASCII characters, no spaces or '/')",
                method: method
            )
        }
    }

    /// A DPoP proof (RFC 9449) for one HTTP request with `userIdentifier`'s DPoP-bound token,
    /// signed inside tokend with the credential's key, which never leaves it. Send the request
    /// with ``DPoPProof/headers``; ask again for the next request (each proof is for one).
    ///
    /// - Parameters:
    ///   - httpMethod: the request's method, e.g. `GET`.
    ///   - httpURI: its absolute URI; the proof leaves out the query and fragment.
    ///   - nonce: the resource server's `DPoP-Nonce`, when its 401 demanded one.
    ///   - minValidity: as for ``credentials(for:minValidity:rejectedToken:)``.
    /// - Throws: ``TokendClientError``: `invalidCredential` for a credential whose tokens are not
    ///   DPoP-bound, `invalidParameter` for a method, URI or nonce tokend refuses, and what
    ///   ``credentials(for:minValidity:rejectedToken:)`` throws.
    public func dpopProof(
        for userIdentifier: String, httpMethod: String, httpURI: String, nonce: String? = nil, minValidity: Duration = .zero
    ) async throws(TokendClientError) -> DPoPProof {
        let call = try Self.dpopCall(userIdentifier, httpMethod: httpMethod, httpURI: httpURI, nonce: nonce, minValidity: minValidity)
        return try Self.dpopProof(in: try await singleReply(call), of: call, for: userIdentifier)
    }

    /// A checked ProvideDPoPProof call.
    static func dpopCall(
        _ userIdentifier: String, httpMethod: String, httpURI: String, nonce: String?, minValidity: Duration
    ) throws(TokendClientError) -> VarlinkCall {
        try checkIdentifier(userIdentifier, name: "userIdentifier", method: TokenProviderMethod.provideDPoPProof.rawValue)
        return DPoPProof.call(
            userIdentifier: userIdentifier, httpMethod: httpMethod, httpURI: httpURI, nonce: nonce,
            minValidSeconds: wholeSecondsRoundingUp(minValidity))
    }

    /// The ``DPoPProof`` of a reply to `call`, which must be for `userIdentifier`.
    static func dpopProof(in reply: VarlinkReply, of call: VarlinkCall, for userIdentifier: String) throws(TokendClientError)
        -> DPoPProof
    {
        let credentials = try credentials(in: reply, of: call, for: userIdentifier)
        let proof: String
        do {
            proof = try ParameterReader(reply.parameters).string("proof")
        } catch {
            throw invalidReply(call, error)
        }
        return DPoPProof(credentials: credentials, proof: proof)
    }

    /// A ProvideTokenReplacement call.
    static func tokenCall(
        _ userIdentifier: String, minValiditySeconds seconds: Int64, rejectedToken: String?, scope: String? = nil, resource: String? = nil
    ) -> VarlinkCall {
        var parameters: JSONObject = ["userIdentifier": .string(userIdentifier)]
        if seconds > 0 { parameters["minValidSeconds"] = .int(seconds) }
        if let rejectedToken { parameters["rejectedToken"] = .string(rejectedToken) }
        if let scope { parameters["scope"] = .string(scope) }
        if let resource { parameters["resource"] = .string(resource) }
        return VarlinkCall(method: TokenProviderMethod.provideTokenReplacement.rawValue, parameters: parameters)
    }

    /// The `credentials` of a reply to `call` (ProvideTokenReplacement, Watch), which must be
    /// `userIdentifier`'s.
    static func credentials(in reply: VarlinkReply, of call: VarlinkCall, for userIdentifier: String) throws(TokendClientError)
        -> Credentials
    {
        let credentials: Credentials
        do {
            guard let object = try ParameterReader(reply.parameters).optionalObject("credentials") else {
                throw VarlinkError.invalidParameter("credentials")
            }
            credentials = try Credentials(json: object)
        } catch {
            throw Self.invalidReply(call, error)
        }
        guard credentials.userIdentifier == userIdentifier else {
            throw TokendClientError(
                code: .protocolError, message: "tokend answered \(call.method) with another user's credentials", method: call.method)
        }
        return credentials
    }

    static func invalidReply(_ call: VarlinkCall, _ error: any Error) -> TokendClientError {
        let detail =
            (error as? VarlinkError)?.parameters["parameter"]?.stringValue.map {
                "field '\($0)' is missing or mistyped"
            }
            ?? "it is malformed"
        return TokendClientError(
            code: .protocolError,
            message: "tokend's reply to \(call.method) is not valid: \(detail)",
            method: call.method,
            cause: error
        )
    }

    static func wholeSecondsRoundingUp(_ duration: Duration) -> Int64 {
        let (seconds, attoseconds) = duration.components
        guard seconds >= 0 else { return 0 }
        guard attoseconds > 0 else { return seconds }
        return seconds == Int64.max ? seconds : seconds + 1
    }
}

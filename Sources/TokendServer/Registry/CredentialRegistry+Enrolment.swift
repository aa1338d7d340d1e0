import Logging
import TokendConfig
import TokendCore
import TokendJSON
import TokendOAuth
import TokendProtocol
import TokendStorage

/// Adding and removing credentials: ``Enrolments`` checks who may, the store makes it durable,
/// then the view and the scheduler learn of it.
extension CredentialRegistry {
    /// The checks of ``add(_:caller:answeredByProvider:dpopKey:)``, made when a login begins,
    /// before the user is sent to the provider, and what the login will do with a credential
    /// already under the name (``LoginRenewal``): renew it in place, replace it, or neither.
    /// The login's store checks again.
    func checkLoginEnrolment(_ request: BeginLoginRequest, caller: CallerIdentity) throws(VarlinkError) -> LoginRenewal.Placement {
        let current = settings.current
        _ = try enrolments.admit(
            user: request.userIdentifier, provider: request.provider, readers: request.readers, caller: caller, settings: current,
            action: "login")
        let existing = view[request.userIdentifier].map {
            LoginRenewal.Existing(provider: $0.provider, readers: $0.readers, ownerUID: $0.enrolment.uid)
        }
        let placement = try decideRenewal(
            request.userIdentifier, existing: existing, provider: request.provider,
            readersGiven: request.readers != nil, replace: request.replace, caller: caller, settings: current)
        if placement != .renew {
            try enrolments.place(
                user: request.userIdentifier, replace: request.replace, caller: caller, settings: current, view: view, action: "login")
        }
        return placement
    }

    /// ``LoginRenewal/decide(existing:provider:readersGiven:replace:caller:access:)``, its
    /// refusals answered as Varlink errors (and the denials logged).
    private func decideRenewal(
        _ user: String, existing: LoginRenewal.Existing?, provider: String, readersGiven: Bool, replace: Bool, caller: CallerIdentity,
        settings current: RuntimeSettings.Values
    ) throws(VarlinkError) -> LoginRenewal.Placement {
        do throws(LoginRenewal.Refusal) {
            return try LoginRenewal.decide(
                existing: existing, provider: provider, readersGiven: readersGiven, replace: replace, caller: caller,
                access: current.accessPolicy)
        } catch {
            switch error {
            case .enrolment(.exists):
                throw .credentialExists(user)
            case .enrolment:
                enrolments.logDenied(caller, action: "login", user: user)
                throw .permissionDenied(user)
            case .notOwner:
                enrolments.logDenied(caller, action: "renew", user: user)
                throw .permissionDenied(
                    user,
                    reason:
                        "only the uid that enrolled '\(user)' or an administrator may renew it; --replace replaces it with a credential of your own"
                )
            case .otherProvider(let held):
                throw .loginFailed(
                    user, reason: "'\(user)' is a credential of provider '\(held)'; renew it there, or replace it with --replace",
                    oauthError: nil)
            case .readersGiven:
                throw .loginFailed(
                    user, reason: "a renewal keeps the credential's readers; drop --reader, or replace it with --replace", oauthError: nil)
            }
        }
    }

    /// Stores a credential. `answeredByProvider`: the tokens come straight from the provider's
    /// token endpoint (a login), so an answer without a usable lifetime gets `assumed_lifetime`,
    /// as a refresh's would; a caller's `AddCredential` must say when its token expires.
    /// `dpopKey`: the DPoP key a login's tokens were bound to. A credential added for a DPoP
    /// provider without one gets a new key, to which its refreshes bind the tokens that follow
    /// (RFC 9449 §5).
    func add(
        _ request: AddCredentialRequest, caller: CallerIdentity, answeredByProvider: Bool = false, dpopKey: SecretString? = nil
    ) async throws(VarlinkError) {
        let readers = try enrolments.admit(
            user: request.userIdentifier, provider: request.provider, readers: request.readers, caller: caller,
            settings: settings.current, action: "add")

        let credential = try await makeCredential(
            request, readers: readers, caller: caller, answeredByProvider: answeredByProvider, dpopKey: dpopKey)

        await lock(request.userIdentifier)
        defer { unlock(request.userIdentifier) }
        try enrolments.place(
            user: request.userIdentifier, replace: request.replace, caller: caller, settings: settings.current, view: view,
            action: "replace")
        enrolments.reserve(caller)
        defer { enrolments.release(caller) }
        let stored = try await insertChecked(credential, request: request, caller: caller)
        grants.forget(stored.userIdentifier)
        plan(stored, providers: settings.current.providers)
        view.store(entry(for: stored, providers: settings.current.providers))
        logger.info(
            "credential added",
            metadata: [
                "user_identifier": "\(stored.userIdentifier)", "provider": "\(stored.provider)",
                "uid": "\(caller.uid)", "pid": "\(caller.pid)", "readers": "\(readers.map(\.description).joined(separator: ","))",
            ])
    }

    /// The credential an add or a login stores, from the request's token response, checked as
    /// a token endpoint's answer would be (and a HAT token verified) before anything is stored.
    private func makeCredential(
        _ request: AddCredentialRequest, readers: [Reader], caller: CallerIdentity, answeredByProvider: Bool, dpopKey: SecretString?
    ) async throws(VarlinkError) -> Credential {
        // A HAT PDA token is verified (signature, alg, iss, application, exp) before anything is stored.
        let isHAT = try await verifyHATEnrolment(request)
        var object = JSONObject()
        object["access_token"] = .string(request.accessToken)
        object.setIfPresent("refresh_token", request.refreshToken.map(JSONValue.string))
        object.setIfPresent("token_type", request.tokenType.map(JSONValue.string))
        object.setIfPresent("expires_in", request.expiresIn.map(JSONValue.int))
        object.setIfPresent("scope", request.scope.map(JSONValue.string))
        let received = now()
        let response: TokenResponse
        let lifetime: TokenLifetime
        let provider = settings.current.providers[request.provider]!
        do {
            // The same validation as a token endpoint's answer.
            response = try TokenResponse.parse(object)
            lifetime =
                answeredByProvider
                ? response.lifetime(receivedAt: received, assumed: provider.refreshPolicy.assumedLifetime)
                : try response.statedLifetime(receivedAt: received)
        } catch {
            throw .invalidCredential(error.description)
        }
        if let reason = lifetime.assumedBecause { notices.assumedLifetime(provider: provider, reason: reason) }
        try Self.checkKeyBinding(
            of: response.accessToken, key: dpopKey, source: dpopKey == nil && !answeredByProvider ? .added : .login, provider: provider)
        let credentialKey = dpopKey ?? (provider.usesDPoP ? DPoPKey().secret : nil)
        if request.refreshToken == nil, !isHAT {
            logger.info(
                "credential has no refresh token; it is served until it expires", metadata: ["user_identifier": "\(request.userIdentifier)"]
            )
        }
        let credential = Credential(
            userIdentifier: request.userIdentifier,
            provider: request.provider,
            accessToken: response.accessToken,
            refreshToken: response.refreshToken,
            tokenType: response.tokenType,
            scope: response.scope,
            expiresAt: lifetime.expiresAt,
            issuedAt: lifetime.issuedAt,
            sessionStartedAt: lifetime.issuedAt,
            readers: readers,
            enrolment: Enrolment(uid: caller.uid, pid: caller.pid, at: received),
            // A login's tokens come from the provider's token endpoint, as a refresh's do: they
            // are tokend's own grant, which a removal revokes (``RevocationRule``).
            status: RefreshStatus(state: .valid, lastRefreshAt: answeredByProvider ? received : nil),
            dpopKey: credentialKey,
            // A JWT refresh token says when it expires: one of the re-login date's ends.
            refreshTokenExpiresAt: response.refreshTokenExpiry(receivedAt: received)
        )
        return credential
    }

    /// Whether the tokens can be used with the DPoP key the credential would get
    /// (``DPoPEnrolment``): not when the access token is bound to a key tokend does not hold
    /// (`cnf.jkt`), nor when a program adds bearer tokens to a DPoP provider that does not bind
    /// them at refresh. Opaque tokens' binding cannot be read.
    nonisolated static func checkKeyBinding(
        of token: SecretString, key: SecretString?, source: DPoPEnrolment.Source, provider: ProviderConfiguration
    ) throws(VarlinkError) {
        let decision = DPoPEnrolment.decide(
            source: source, providerUsesDPoP: provider.usesDPoP, providerBindsOnRefresh: provider.dpopBindsOnRefresh,
            boundThumbprint: JWTTimeClaims(jwt: token.value)?.dpopKeyThumbprint, heldThumbprint: key.flatMap { try? DPoPKey($0).thumbprint }
        )
        switch decision {
        case .accept: return
        case .refuse(let reason): throw .invalidCredential(reason)
        }
    }

    /// Why a removal revoked nothing without being asked to (``RevocationRule``).
    static let addedTokensNotRevoked =
        "tokend never got tokens from the provider for this credential (they came from AddCredential), so it did not revoke them"

    /// Revokes `credential`'s tokens at its provider (RFC 7009) as `decision` says, and logs
    /// the outcome; a failure is logged and returned, never thrown (`after`: what happens
    /// regardless).
    @discardableResult
    private func revokeAtProvider(_ credential: Credential, decision: RevocationRule.Decision, after: String) async -> RemovalResult {
        let metadata: Logger.Metadata = ["user_identifier": "\(credential.userIdentifier)", "provider": "\(credential.provider)"]
        switch decision {
        case .nothing:
            logger.info(
                "tokens not revoked: the provider never answered tokend for this credential (its tokens came from AddCredential)",
                metadata: metadata)
            return RemovalResult(revocation: .notRevoked, problem: Self.addedTokensNotRevoked)
        case .refreshToken, .accessToken:
            break
        }
        guard let refresher = refreshers.byProvider[credential.provider] else {
            return RemovalResult(revocation: .failed, problem: "provider \(credential.provider) is not configured")
        }
        switch await refresher.revoke(credential) {
        case .failed(let problem):
            logger.warning("revoking the refresh token failed; \(after)", metadata: metadata.merging(["problem": "\(problem)"]) { $1 })
            return RemovalResult(revocation: .failed, problem: problem)
        case .revoked:
            logger.info("refresh token revoked", metadata: metadata)
            return RemovalResult(revocation: .revoked)
        case .unsupported:
            logger.info("the provider has no revocation endpoint; the refresh token was not revoked", metadata: metadata)
            return RemovalResult(revocation: .unsupported)
        }
    }

    /// Stores a login's tokens in place of the credential under the same name
    /// (``LoginRenewal``): its readers, owner and provider stay, so token-file bindings and
    /// `Watch` subscribers see the new token. The old grant is revoked at the provider once the
    /// new one is stored (only what tokend obtained, ``RevocationRule``).
    func renew(_ request: AddCredentialRequest, caller: CallerIdentity, dpopKey: SecretString?) async throws(VarlinkError) {
        let user = request.userIdentifier
        let login = try await makeCredential(
            request, readers: [.uid(caller.uid)], caller: caller, answeredByProvider: true, dpopKey: dpopKey)
        let (old, renewed) = try await storeRenewal(login, caller: caller)
        logger.info(
            "credential renewed",
            metadata: [
                "user_identifier": "\(user)", "provider": "\(renewed.provider)", "uid": "\(caller.uid)", "pid": "\(caller.pid)",
                "owner_uid": "\(renewed.enrolment.uid)",
            ])
        await revokeAtProvider(old, decision: LoginRenewal.revocation(old: old, renewed: renewed), after: "the credential is renewed")
    }

    /// The locked part of ``renew(_:caller:dpopKey:)``: checked again against the stored row,
    /// written on condition that row is still the one checked (a refresh or another node may
    /// write it meanwhile: then once more against the new row).
    private func storeRenewal(_ login: Credential, caller: CallerIdentity) async throws(VarlinkError) -> (Credential, Credential) {
        let user = login.userIdentifier
        await lock(user)
        defer { unlock(user) }
        for attempt in 0..<2 {
            let stored: Credential?
            do {
                stored = try await store.load(userIdentifier: user)
            } catch {
                throw .storageFailed("the credential could not be read")
            }
            guard let stored else {
                throw .loginFailed(user, reason: "the credential was removed while the login ran; log in again", oauthError: nil)
            }
            let existing = LoginRenewal.Existing(provider: stored.provider, readers: stored.readers, ownerUID: stored.enrolment.uid)
            guard
                try decideRenewal(
                    user, existing: existing, provider: login.provider, readersGiven: false, replace: false, caller: caller,
                    settings: settings.current) == .renew
            else { throw .permissionDenied(user) }
            let renewed = LoginRenewal.renewed(stored, with: login)
            do {
                let written = try await store.insert(renewed, replacing: true, expecting: StoredRowExpectation(seen: stored.generation))
                grants.forget(user)
                plan(written, providers: settings.current.providers)
                view.store(entry(for: written, providers: settings.current.providers))
                return (stored, written)
            } catch let error as StorageError where error.code == .conflict && attempt == 0 {
                continue
            } catch {
                logger.error("storing a renewed credential failed: \(error)", metadata: ["user_identifier": "\(user)"])
                throw .storageFailed("the credential could not be stored")
            }
        }
        throw .storageFailed("the credential changed while it was being renewed; log in again")
    }

    /// Removes a credential, revoking at the provider first what ``RevocationRule`` allows
    /// (with `revokeAnyway`, which the router grants administrators only, whatever the tokens'
    /// origin).
    /// - Returns: What happened at the provider.
    @discardableResult
    func remove(_ userIdentifier: String, caller: CallerIdentity, revokeAnyway: Bool = false) async throws(VarlinkError)
        -> RemovalResult
    {
        let current = settings.current
        guard let existing = view[userIdentifier] else {
            // Someone else's credential and a missing one get the same answer from non-administrators.
            guard current.accessPolicy.isAdmin(caller) else {
                enrolments.logDenied(caller, action: "remove", user: userIdentifier)
                throw .permissionDenied(userIdentifier)
            }
            throw .unknownUser(userIdentifier)
        }
        try enrolments.checkRemoval(user: userIdentifier, readers: existing.readers, caller: caller, settings: current)
        await lock(userIdentifier)
        defer { unlock(userIdentifier) }
        let stored: Credential?
        do {
            stored = try await store.load(userIdentifier: userIdentifier)
        } catch {
            throw .storageFailed("the credential could not be read")
        }
        guard let stored else {
            view.remove(userIdentifier)
            throw .unknownUser(userIdentifier)
        }
        // Checked again against the stored row, which a node's view may lag behind (a shared store).
        try enrolments.checkRemoval(user: userIdentifier, readers: stored.readers, caller: caller, settings: current)
        // Revoke first (RFC 7009), so the refresh token dies with the credential. A provider
        // that cannot be reached does not stop the removal the caller asked for. Only what
        // tokend got from the provider is revoked (``RevocationRule``).
        let revocation = await revokeAtProvider(
            stored, decision: RevocationRule.decide(stored, anyway: revokeAnyway), after: "removing the credential anyway")
        do {
            // Only the row checked above: one written since is not removed.
            _ = try await store.remove(userIdentifier: userIdentifier, expectedGeneration: stored.generation)
        } catch let error as StorageError where error.code == .conflict {
            throw .storageFailed("the credential changed while it was being removed; try again")
        } catch {
            logger.error("removing a credential failed: \(error)", metadata: ["user_identifier": "\(userIdentifier)"])
            throw .storageFailed("the credential could not be removed")
        }
        // Invalidated before the reply goes out: once removal is acknowledged, no caller gets the token.
        view.remove(userIdentifier)
        scheduler.cancel(userIdentifier)
        grants.forget(userIdentifier)
        logger.info(
            "credential removed",
            metadata: [
                "user_identifier": "\(userIdentifier)", "uid": "\(caller.uid)", "pid": "\(caller.pid)",
                "revocation": "\(revocation.revocation?.rawValue ?? "-")",
            ])
        return revocation
    }
}

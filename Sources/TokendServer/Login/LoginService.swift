import Logging
import TokendConfig
import TokendCore
import TokendJSON
import TokendOAuth
import TokendProtocol

/// Runs the login flows for `BeginLogin` and `CompleteLogin`.
///
/// The daemon talks to the provider itself, so the refresh token goes from the token endpoint
/// straight into the store; `tokenctl` only ever sees URLs and the user code. Tokens are stored
/// through `CredentialRegistry.add`, the same checked path as `AddCredential` (access rules,
/// token response validation, a HAT token's signature and claims).
struct LoginService: Sendable {
    let sessions: LoginSessions
    let registry: CredentialRegistry
    let view: CredentialView
    let settings: RuntimeSettings
    let logger: Logger
    let now: @Sendable () -> Timestamp

    /// How long a browser login (code, HAT) may take from `BeginLogin` to `CompleteLogin`.
    static let browserLoginLifetime: Duration = .seconds(600)
    /// The longest `CompleteLogin` may run: a device code's lifetime plus the last poll.
    static let maximumCompletion: Duration = DeviceAuthorization.maximumLifetime + .seconds(60)

    // MARK: BeginLogin

    func begin(_ request: BeginLoginRequest, caller: CallerIdentity) async throws(VarlinkError) -> LoginChallenge {
        let user = request.userIdentifier
        // The rules of AddCredential, checked before the user is sent anywhere.
        // A login under a name that has a credential renews it, for its owner or an administrator.
        let placement = try await registry.checkLoginEnrolment(request, caller: caller)
        guard let provider = settings.current.providers[request.provider] else { throw .unknownProvider(request.provider) }

        let started = now()
        // The per-uid and total limits, before the provider is asked anything.
        try await sessions.reserve(uid: caller.uid, userIdentifier: user, now: started)
        let id = PKCE.randomToken()
        let flow: LoginSession.Flow
        var challenge: LoginChallenge
        do throws(LoginError) {
            switch provider.kind {
            case .oauth2(let oauth):
                let endpoints = try await LoginEndpoints.resolve(oauth, discovery: OIDCDiscovery(pool: registry.httpPool))
                let chosen = request.flow ?? (endpoints.deviceAuthorization != nil ? .device : .code)
                switch chosen {
                case .device:
                    guard let endpoint = endpoints.deviceAuthorization else {
                        throw LoginError(
                            "provider \(provider.name) has no device authorization endpoint (set device_authorization_endpoint, or log in with the code flow)"
                        )
                    }
                    // The token endpoint, discovered or not, for an assertion whose audience it is.
                    var resolved = oauth
                    resolved.tokenEndpoint = endpoints.token
                    let device = try await LoginGrantClient(pool: registry.httpPool).authorizeDevice(endpoint: endpoint, settings: resolved)
                    flow = .device(device, endpoints: endpoints, settings: oauth)
                    challenge = LoginChallenge(
                        loginID: id, flow: .device, verificationURI: device.verificationURI,
                        verificationURIComplete: device.verificationURIComplete,
                        userCode: device.userCode, startedAt: started.secondsSince1970,
                        expiresAt: (started + device.expiresIn).secondsSince1970,
                        interval: device.interval.wholeSeconds
                    )
                case .code:
                    guard let endpoint = endpoints.authorization else {
                        throw LoginError("provider \(provider.name) has no authorization endpoint (set authorization_endpoint or issuer)")
                    }
                    guard let port = oauth.redirectPort ?? request.redirectPort else {
                        throw LoginError("the code flow needs a redirect port")
                    }
                    let redirectURI = "http://127.0.0.1:\(port)/callback"
                    let verifier = PKCE.makeVerifier()
                    let state = PKCE.randomToken()
                    let nonce = LoginRequest.requestsOpenID(oauth.scope) || endpoints.jwksURI != nil ? PKCE.randomToken() : nil
                    let url = LoginRequest.authorizationURL(
                        endpoint: endpoint, clientID: oauth.clientID, redirectURI: redirectURI, scope: oauth.scope, state: state,
                        codeChallenge: PKCE.challenge(for: verifier), nonce: nonce
                    )
                    flow = .code(
                        verifier: verifier, state: state, nonce: nonce, redirectURI: redirectURI, endpoints: endpoints, settings: oauth)
                    challenge = LoginChallenge(
                        loginID: id, flow: .code, authorizationURL: url, redirectURI: redirectURI, startedAt: started.secondsSince1970,
                        expiresAt: (started + Self.browserLoginLifetime).secondsSince1970
                    )
                case .hat:
                    throw LoginError("provider \(provider.name) is an OAuth 2.0 provider; log in with the device or code flow")
                }
            case .hat(let hat):
                guard request.flow == nil || request.flow == .hat else {
                    throw LoginError("provider \(provider.name) is a HAT PDA; it only has the hat login")
                }
                flow = .hat(hat)
                challenge = LoginChallenge(
                    loginID: id, flow: .hat,
                    authorizationURL: LoginRequest.hatLoginURL(
                        origin: hat.origin, application: hat.application, redirect: hat.redirect, fallback: hat.fallback),
                    redirectURI: hat.redirect, startedAt: started.secondsSince1970,
                    expiresAt: (started + Self.browserLoginLifetime).secondsSince1970
                )
            case .exec:
                throw LoginError("provider \(provider.name) runs a command to refresh; it has no login (use tokenctl add)")
            }
        } catch {
            await sessions.release(uid: caller.uid)
            logger.notice(
                "login could not begin",
                metadata: [
                    "user_identifier": "\(user)", "provider": "\(provider.name)", "uid": "\(caller.uid)", "reason": "\(error.reason)",
                ])
            throw .loginFailed(user, reason: error.reason, oauthError: error.oauthError)
        }
        let session = LoginSession(
            id: id, caller: caller, userIdentifier: user, provider: provider.name, readers: request.readers, replace: request.replace,
            renews: placement == .renew, startedAt: started, expiresAt: Timestamp(secondsSince1970: challenge.expiresAt), flow: flow
        )
        await sessions.insert(session)
        logger.info(
            "login started",
            metadata: [
                "user_identifier": "\(user)", "provider": "\(provider.name)", "flow": "\(challenge.flow.rawValue)", "uid": "\(caller.uid)",
                "pid": "\(caller.pid)",
            ])
        return challenge
    }

    // MARK: CompleteLogin

    func complete(_ id: String, redirectURL: String?, caller: CallerIdentity) async throws(VarlinkError) -> CredentialStatus {
        let session: LoginSession
        do {
            session = try await sessions.take(id, caller: caller, now: now())
        } catch {
            if error.name == TokendErrorName.permissionDenied.rawValue {
                logger.notice(
                    "permission denied",
                    metadata: ["uid": "\(caller.uid)", "pid": "\(caller.pid)", "action": "complete another caller's login"])
            }
            throw error
        }
        let user = session.userIdentifier
        let metadata: Logger.Metadata = [
            "user_identifier": "\(user)", "provider": "\(session.provider)", "flow": "\(session.flow.name.rawValue)",
            "uid": "\(caller.uid)",
        ]
        let request: AddCredentialRequest
        // The key the provider binds the tokens to, for a DPoP provider (RFC 9449): made here,
        // used for the token request, and stored sealed with the credential.
        let dpopKey = session.flow.settings?.dpop == true ? DPoPKey() : nil
        do throws(LoginError) {
            request = try await credential(for: session, redirectURL: redirectURL, dpopKey: dpopKey)
        } catch {
            logger.notice("login failed", metadata: metadata.merging(["reason": "\(error.reason)"]) { $1 })
            throw .loginFailed(user, reason: error.reason, oauthError: error.oauthError)
        }
        do {
            if session.renews {
                try await registry.renew(request, caller: session.caller, dpopKey: dpopKey?.secret)
            } else {
                try await registry.add(request, caller: session.caller, answeredByProvider: true, dpopKey: dpopKey?.secret)
            }
        } catch {
            logger.notice("login failed: the credential was not stored", metadata: metadata.merging(["error": "\(error.name)"]) { $1 })
            throw error
        }
        logger.info(session.renews ? "login completed: credential renewed" : "login completed", metadata: metadata)
        guard let entry = view[user] else { throw .unknownUser(user) }
        return entry.credentialStatus(now: now())
    }

    /// Runs the rest of the flow and returns what to store.
    private func credential(
        for session: LoginSession, redirectURL: String?, dpopKey: DPoPKey?
    ) async throws(LoginError) -> AddCredentialRequest {
        switch session.flow {
        case .device(let device, let endpoints, let oauth):
            let response = try await pollDevice(
                device, endpoint: endpoints.token, settings: oauth, dpopKey: dpopKey, until: session.expiresAt)
            try await verifyOIDC(response, endpoints: endpoints, settings: oauth, nonce: nil)
            return request(from: response, session: session)
        case .code(let verifier, let state, let nonce, let redirectURI, let endpoints, let oauth):
            guard let redirectURL else { throw LoginError("the code flow needs the redirect URL") }
            let code = try AuthorizationRedirect.code(from: redirectURL, redirectURI: redirectURI, state: state)
            let response = try await LoginGrantClient(pool: registry.httpPool).exchangeCode(
                endpoint: endpoints.token, settings: oauth, code: code, redirectURI: redirectURI, verifier: verifier, dpopKey: dpopKey
            )
            try await verifyOIDC(response, endpoints: endpoints, settings: oauth, nonce: nonce)
            return request(from: response, session: session)
        case .hat(let hat):
            guard let redirectURL else { throw LoginError("the HAT login needs the redirect URL") }
            let token = try AuthorizationRedirect.hatToken(from: redirectURL, redirect: hat.redirect, fallback: hat.fallback)
            try LoginRequest.checkFreshness(token: token, loginStartedAt: session.startedAt)
            // Signature, alg, iss, application and exp are checked by the registry's add path.
            return AddCredentialRequest(
                userIdentifier: session.userIdentifier, provider: session.provider, accessToken: token, tokenType: "Bearer",
                readers: session.readers, replace: session.replace
            )
        }
    }

    private func request(from response: TokenResponse, session: LoginSession) -> AddCredentialRequest {
        AddCredentialRequest(
            userIdentifier: session.userIdentifier, provider: session.provider, accessToken: response.accessToken.value,
            refreshToken: response.refreshToken?.value, tokenType: response.tokenType, expiresIn: response.expiresIn?.wholeSeconds,
            scope: response.scope, readers: session.readers, replace: session.replace
        )
    }

    /// Polls the token endpoint (RFC 8628 §3.4) until the user approves or denies, or the code
    /// expires. Bounded by the code's lifetime.
    private func pollDevice(
        _ device: DeviceAuthorization, endpoint: String, settings: OAuth2Settings, dpopKey: DPoPKey?, until deadline: Timestamp
    ) async throws(LoginError) -> TokenResponse {
        let client = LoginGrantClient(pool: registry.httpPool)
        var polling = DevicePolling(interval: device.interval)
        var wait = device.interval
        while true {
            // One poll may go past the deadline, so that the provider's own expired_token is
            // what the user hears when it agrees the code has expired.
            guard now() < deadline + wait else {
                throw LoginError("the device code expired before the login was approved; start a new login", oauthError: "expired_token")
            }
            do {
                try await Task.sleep(for: wait)
            } catch {
                throw LoginError("the login was cancelled")
            }
            let step: DevicePolling.Step
            if let answer = await client.pollDevice(
                endpoint: endpoint, settings: settings, deviceCode: device.deviceCode, dpopKey: dpopKey)
            {
                step = polling.next(status: answer.status, body: answer.body)
            } else {
                step = polling.transportFailure()
            }
            switch step {
            case .success(let response): return response
            case .fail(let error): throw error
            case .wait(let next):
                if polling.slowDowns > 0, next > wait {
                    logger.info("the provider asked to poll more slowly", metadata: ["interval": "\(next.wholeSeconds)s"])
                }
                wait = next
            }
        }
    }

    /// The OpenID Connect checks: the ID token (and a JWT access token when configured) against
    /// the issuer's JWKS. Runs only for providers with an issuer whose discovery names a JWKS.
    private func verifyOIDC(_ response: TokenResponse, endpoints: LoginEndpoints, settings: OAuth2Settings, nonce: String?)
        async throws(LoginError)
    {
        guard let issuer = endpoints.issuer, let jwksURI = endpoints.jwksURI else {
            if settings.verifyAccessToken {
                throw LoginError("verify_access_token needs an issuer whose discovery document names a jwks_uri")
            }
            return
        }
        let verifier = await sessions.verifier(jwksURI: jwksURI, caFile: settings.caFile, proxy: settings.proxy, pool: registry.httpPool)
        if let idToken = response.idToken {
            let expectations = JWTExpectations(
                issuer: issuer, audience: settings.clientID, authorizedParty: settings.clientID, nonce: nonce, what: "ID token")
            _ = try await verifier.verify(idToken.value, expectations: expectations, now: now())
        } else if LoginRequest.requestsOpenID(response.scope ?? settings.scope) {
            throw LoginError("the provider returned no ID token although the login asked for openid")
        }
        if settings.verifyAccessToken {
            let expectations = JWTExpectations(issuer: issuer, audience: settings.audience, what: "access token")
            _ = try await verifier.verify(response.accessToken.value, expectations: expectations, now: now())
        }
    }
}

import TokendConfig
import TokendCore
import TokendOAuth
import TokendProtocol

/// A login begun with `BeginLogin` and not yet completed. It holds the login's secrets (the
/// device code, the PKCE verifier, state and nonce), which never leave the daemon, and the
/// caller that began it, the only one who may complete it.
struct LoginSession: Sendable {
    enum Flow: Sendable {
        case device(DeviceAuthorization, endpoints: LoginEndpoints, settings: OAuth2Settings)
        case code(
            verifier: SecretString, state: String, nonce: String?, redirectURI: String, endpoints: LoginEndpoints, settings: OAuth2Settings)
        case hat(HATSettings)

        /// The OAuth settings of a device or code login.
        var settings: OAuth2Settings? {
            switch self {
            case .device(_, _, let settings), .code(_, _, _, _, _, let settings): settings
            case .hat: nil
            }
        }

        var name: LoginFlow {
            switch self {
            case .device: .device
            case .code: .code
            case .hat: .hat
            }
        }
    }

    let id: String
    let caller: CallerIdentity
    let userIdentifier: String
    let provider: String
    let readers: [String]?
    let replace: Bool
    /// The login renews the credential under the name in place (``LoginRenewal``).
    let renews: Bool
    let startedAt: Timestamp
    let expiresAt: Timestamp
    let flow: Flow
}

/// The logins in progress: bounded in number, per caller and in total, and forgotten when
/// they expire, complete or are cancelled.
actor LoginSessions {
    static let maximumTotal = 64
    static let maximumPerCaller = 8

    private var sessions: [String: LoginSession] = [:]
    /// Logins being begun (their provider not answered yet), per uid: they count against the
    /// limits like the sessions they become, so a user's concurrent `BeginLogin` calls cannot
    /// send the provider more requests than the limits allow.
    private var beginning: [UInt32: Int] = [:]
    /// JWKS verifiers by `jwks_uri`, kept across logins so a key set is not fetched per login.
    private var verifiers: [String: JWKSVerifier] = [:]

    /// Takes a place for a login of `uid`, first dropping expired sessions. Called before the
    /// provider is asked anything (discovery, the device authorization request); the place is
    /// given back by ``release(uid:)`` or becomes the session (``insert(_:)``).
    /// - Throws: `LoginFailed` when too many logins are open or being begun.
    func reserve(uid: UInt32, userIdentifier: String, now: Timestamp) throws(VarlinkError) {
        sessions = sessions.filter { $0.value.expiresAt > now }
        guard sessions.count + beginning.values.reduce(0, +) < Self.maximumTotal else {
            throw .loginFailed(userIdentifier, reason: "too many logins are in progress; try again in a few minutes", oauthError: nil)
        }
        guard sessions.values.count(where: { $0.caller.uid == uid }) + beginning[uid, default: 0] < Self.maximumPerCaller else {
            throw .loginFailed(
                userIdentifier, reason: "this user has too many logins in progress; finish or cancel one first", oauthError: nil)
        }
        beginning[uid, default: 0] += 1
    }

    /// Gives back a place taken by ``reserve(uid:userIdentifier:now:)`` for a login that could not begin.
    func release(uid: UInt32) { beginning.decrementCount(uid) }

    /// Adds `session`, in the place its caller reserved.
    func insert(_ session: LoginSession) {
        beginning.decrementCount(session.caller.uid)
        sessions[session.id] = session
    }

    /// Removes and returns the login `id` for `caller` (a login is completed once).
    /// - Throws: `UnknownLogin` when there is no such live login; `PermissionDenied` when
    ///   another uid began it (the login stays for its owner).
    func take(_ id: String, caller: CallerIdentity, now: Timestamp) throws(VarlinkError) -> LoginSession {
        guard let session = sessions[id], session.expiresAt > now else {
            sessions[id] = nil
            throw .unknownLogin(id)
        }
        guard session.caller.uid == caller.uid else { throw .permissionDenied(session.userIdentifier) }
        sessions[id] = nil
        return session
    }

    /// The shared verifier for an issuer's key set.
    func verifier(jwksURI: String, caFile: String?, proxy: ProxySetting, pool: HTTPClientPool) -> JWKSVerifier {
        if let existing = verifiers[jwksURI] { return existing }
        let verifier = JWKSVerifier(jwksURI: jwksURI, caFile: caFile, proxy: proxy, pool: pool)
        verifiers[jwksURI] = verifier
        return verifier
    }
}

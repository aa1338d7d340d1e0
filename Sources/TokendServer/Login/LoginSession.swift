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
    /// JWKS verifiers by `jwks_uri`, kept across logins so a key set is not fetched per login.
    private var verifiers: [String: JWKSVerifier] = [:]

    /// Adds `session`, first dropping expired ones.
    /// - Throws: `LoginFailed` when too many logins are open.
    func insert(_ session: LoginSession, now: Timestamp) throws(VarlinkError) {
        sessions = sessions.filter { $0.value.expiresAt > now }
        guard sessions.count < Self.maximumTotal else {
            throw .loginFailed(
                session.userIdentifier, reason: "too many logins are in progress; try again in a few minutes", oauthError: nil)
        }
        guard sessions.values.count(where: { $0.caller.uid == session.caller.uid }) < Self.maximumPerCaller else {
            throw .loginFailed(
                session.userIdentifier, reason: "this user has too many logins in progress; finish or cancel one first", oauthError: nil)
        }
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

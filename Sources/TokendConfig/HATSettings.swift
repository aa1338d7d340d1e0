import TokendCore

/// A HAT PDA (Personal Data Account) provider (`kind = "hat"`).
///
/// A PDA issues RS256-signed JWTs through its `hatlogin` page and hands a renewed token in a
/// response header of authenticated calls. The renewal endpoint, the header and the idle limit
/// are not in the HAT documentation; they come from the HAT server's own sources, so each is
/// configurable here with those sources' values as defaults.
public struct HATSettings: Sendable, Hashable {
    /// The PDA's address as it appears in its tokens' `iss`, e.g. `postman.hubat.net`
    /// (lower-cased; a `:port` is allowed, for tests).
    public var address: String
    /// The application name registered on the PDA; tokens must carry it in `application`.
    public var application: String
    /// The success redirect registered for the application (the login page sends the token here).
    public var redirect: String
    /// The failure redirect registered for the application.
    public var fallback: String
    /// `https`, or `http` for a loopback address (tests).
    public var scheme: String
    /// A PEM file of CA certificates trusted for this PDA, besides the system's.
    public var caFile: String?
    /// How the PDA is reached: through the environment's proxy (the default), directly, or a proxy.
    public var proxy: ProxySetting = .environment
    /// Where the PDA serves its PEM `PUBLIC KEY`.
    public var publicKeyPath: String
    /// A cheap authenticated endpoint whose response carries a renewed token.
    public var renewalPath: String
    /// The request and response header that carries the token.
    public var renewalHeader: String
    /// The PDA drops a token unused for this long; a token is never served past `iat` plus this.
    public var idleLimit: Duration
    /// How long after a token's `iat` tokend renews it: well inside `idleLimit`.
    public var renewalInterval: Duration
    /// After a signature fails against the cached public key, the key is fetched again (the PDA
    /// may have rotated it), but at most once per this interval.
    public var keyRefetchInterval: Duration = .seconds(60)

    public static let defaultPublicKeyPath = "/publickey"
    public static let defaultRenewalPath = "/users/access_token/validate"
    public static let defaultRenewalHeader = "X-Auth-Token"
    public static let defaultIdleLimit: Duration = .seconds(3 * 24 * 3600)
    /// A PDA token dies 30 days after the login, however often it was renewed.
    public static let defaultMaxSessionAge: Duration = .seconds(30 * 24 * 3600)

    public init(
        address: String, application: String, redirect: String, fallback: String, scheme: String = "https",
        caFile: String? = nil, publicKeyPath: String = HATSettings.defaultPublicKeyPath,
        renewalPath: String = HATSettings.defaultRenewalPath, renewalHeader: String = HATSettings.defaultRenewalHeader,
        idleLimit: Duration = HATSettings.defaultIdleLimit, renewalInterval: Duration? = nil
    ) {
        self.address = address
        self.application = application
        self.redirect = redirect
        self.fallback = fallback
        self.scheme = scheme
        self.caFile = caFile
        self.publicKeyPath = publicKeyPath
        self.renewalPath = renewalPath
        self.renewalHeader = renewalHeader
        self.idleLimit = idleLimit
        self.renewalInterval = renewalInterval ?? HATSettings.defaultRenewalInterval(idleLimit: idleLimit)
    }

    /// A third of the idle limit: two renewals can fail in a row before the PDA drops the token.
    public static func defaultRenewalInterval(idleLimit: Duration) -> Duration { idleLimit / 3 }

    /// `scheme://address`, e.g. `https://postman.hubat.net`.
    public var origin: String { "\(scheme)://\(address)" }
    public var publicKeyURL: String { origin + publicKeyPath }
    public var renewalURL: String { origin + renewalPath }
}

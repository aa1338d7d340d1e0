import TokendJSON

/// How a login runs: `BeginLogin`'s `flow`.
public enum LoginFlow: String, Sendable, Hashable, CaseIterable {
    /// The device authorization grant (RFC 8628): the user approves on another device.
    case device
    /// The authorization code grant with PKCE (RFC 7636) over a loopback redirect (RFC 8252).
    case code
    /// A HAT PDA's `hatlogin` page, which redirects back with the token.
    case hat
}

/// The parameters of `BeginLogin`.
public struct BeginLoginRequest: Sendable, Hashable {
    public var userIdentifier: String
    public var provider: String
    /// `nil`: the provider's default flow.
    public var flow: LoginFlow?
    /// The 127.0.0.1 port the caller listens on for the code flow's redirect.
    public var redirectPort: Int?
    public var readers: [String]?
    public var replace: Bool

    public init(
        userIdentifier: String, provider: String, flow: LoginFlow? = nil, redirectPort: Int? = nil, readers: [String]? = nil,
        replace: Bool = false
    ) {
        self.userIdentifier = userIdentifier
        self.provider = provider
        self.flow = flow
        self.redirectPort = redirectPort
        self.readers = readers
        self.replace = replace
    }

    public var json: JSONObject {
        var object: JSONObject = ["userIdentifier": .string(userIdentifier), "provider": .string(provider)]
        object.setIfPresent("flow", flow.map { .string($0.rawValue) })
        object.setIfPresent("redirectPort", redirectPort.map { .int(Int64($0)) })
        object.setIfPresent("readers", readers.map { .array($0.map(JSONValue.string)) })
        if replace { object["replace"] = .bool(true) }
        return object
    }

    public init(json object: JSONObject) throws(VarlinkError) {
        let r = ParameterReader(object)
        var flow: LoginFlow?
        if let text = try r.optionalString("flow") {
            guard let parsed = LoginFlow(rawValue: text) else { throw .invalidParameter("flow") }
            flow = parsed
        }
        var port: Int?
        if let value = try r.optionalInt("redirectPort") {
            guard (1...65535).contains(value) else { throw .invalidParameter("redirectPort") }
            port = Int(value)
        }
        self.init(
            userIdentifier: try r.string("userIdentifier"), provider: try r.string("provider"), flow: flow, redirectPort: port,
            readers: try r.optionalStringArray("readers"), replace: try r.optionalBool("replace") ?? false
        )
    }
}

/// The reply of `BeginLogin`: what the user must do. It carries no secret: the device code,
/// the PKCE verifier and the nonce stay in the daemon.
public struct LoginChallenge: Sendable, Hashable {
    public var loginID: String
    public var flow: LoginFlow
    /// Device flow: where the user enters ``userCode``.
    public var verificationURI: String?
    /// Device flow: the same with the code filled in, when the provider offers it.
    public var verificationURIComplete: String?
    public var userCode: String?
    /// Code and HAT flows: the page to open in a browser.
    public var authorizationURL: String?
    /// Code and HAT flows: where the browser comes back (a loopback URL to listen on, or a
    /// registered URL the user copies back).
    public var redirectURI: String?
    /// Seconds since the epoch.
    public var startedAt: Int64
    /// Seconds since the epoch; the login must be completed before.
    public var expiresAt: Int64
    /// Device flow: the polling interval in seconds.
    public var interval: Int64?
    /// What the login's readers will not do here (a program reader that can never match);
    /// empty when nothing is to be said.
    public var warnings: [String] = []

    public init(
        loginID: String, flow: LoginFlow, verificationURI: String? = nil, verificationURIComplete: String? = nil, userCode: String? = nil,
        authorizationURL: String? = nil, redirectURI: String? = nil, startedAt: Int64, expiresAt: Int64, interval: Int64? = nil
    ) {
        self.loginID = loginID
        self.flow = flow
        self.verificationURI = verificationURI
        self.verificationURIComplete = verificationURIComplete
        self.userCode = userCode
        self.authorizationURL = authorizationURL
        self.redirectURI = redirectURI
        self.startedAt = startedAt
        self.expiresAt = expiresAt
        self.interval = interval
    }

    public var json: JSONObject {
        var object: JSONObject = ["loginId": .string(loginID), "flow": .string(flow.rawValue)]
        object.setIfPresent("verificationUri", verificationURI.map(JSONValue.string))
        object.setIfPresent("verificationUriComplete", verificationURIComplete.map(JSONValue.string))
        object.setIfPresent("userCode", userCode.map(JSONValue.string))
        object.setIfPresent("authorizationUrl", authorizationURL.map(JSONValue.string))
        object.setIfPresent("redirectUri", redirectURI.map(JSONValue.string))
        object["startedAt"] = .int(startedAt)
        object["expiresAt"] = .int(expiresAt)
        object.setIfPresent("interval", interval.map(JSONValue.int))
        if !warnings.isEmpty { object["warnings"] = .array(warnings.map(JSONValue.string)) }
        return object
    }

    public init(json object: JSONObject) throws(VarlinkError) {
        let r = ParameterReader(object)
        guard let flow = LoginFlow(rawValue: try r.string("flow")) else { throw .invalidParameter("flow") }
        self.init(
            loginID: try r.string("loginId"), flow: flow, verificationURI: try r.optionalString("verificationUri"),
            verificationURIComplete: try r.optionalString("verificationUriComplete"), userCode: try r.optionalString("userCode"),
            authorizationURL: try r.optionalString("authorizationUrl"), redirectURI: try r.optionalString("redirectUri"),
            startedAt: try r.int("startedAt"), expiresAt: try r.int("expiresAt"), interval: try r.optionalInt("interval")
        )
        warnings = try r.optionalStringArray("warnings") ?? []
    }
}

extension VarlinkError {
    public static func loginFailed(_ userIdentifier: String, reason: String, oauthError: String?) -> VarlinkError {
        var parameters: JSONObject = ["userIdentifier": .string(userIdentifier), "reason": .string(reason)]
        parameters.setIfPresent("oauthError", oauthError.map(JSONValue.string))
        return VarlinkError(name: TokendErrorName.loginFailed.rawValue, parameters: parameters)
    }

    public static func unknownLogin(_ loginID: String) -> VarlinkError {
        VarlinkError(name: TokendErrorName.unknownLogin.rawValue, parameters: ["loginId": .string(loginID)])
    }
}

import TokendJSON

/// A warning that a credential needs a new login soon: one reply of `WatchReloginWarnings`
/// carries a list of them.
public struct ReloginWarning: Sendable, Hashable {
    public var userIdentifier: String
    public var provider: String
    /// Seconds since the epoch after which no refresh can keep the credential alive.
    public var reloginBy: Int64
    /// The threshold that passed, as written in the provider's `relogin_warning` (`7d`, `1h`).
    public var threshold: String
    /// Why this date: `max_token_age`, `session_end`, `refresh_token_expiry` or `token_expiry`.
    public var reason: String
    /// What the person runs to renew, e.g. `tokenctl login alice`.
    public var command: String

    public init(userIdentifier: String, provider: String, reloginBy: Int64, threshold: String, reason: String, command: String) {
        self.userIdentifier = userIdentifier
        self.provider = provider
        self.reloginBy = reloginBy
        self.threshold = threshold
        self.reason = reason
        self.command = command
    }

    public var json: JSONObject {
        [
            "userIdentifier": .string(userIdentifier), "provider": .string(provider), "reloginBy": .int(reloginBy),
            "threshold": .string(threshold), "reason": .string(reason), "command": .string(command),
        ]
    }

    public init(json object: JSONObject) throws(VarlinkError) {
        let r = ParameterReader(object)
        self.init(
            userIdentifier: try r.string("userIdentifier"), provider: try r.string("provider"), reloginBy: try r.int("reloginBy"),
            threshold: try r.string("threshold"), reason: try r.string("reason"), command: try r.string("command"))
    }

    /// The warnings of one `WatchReloginWarnings` reply's parameters.
    public static func list(from parameters: JSONObject) throws(VarlinkError) -> [ReloginWarning] {
        guard case .array(let values)? = parameters["warnings"] else { throw .invalidParameter("warnings") }
        var warnings: [ReloginWarning] = []
        for value in values {
            guard case .object(let object) = value else { throw .invalidParameter("warnings") }
            warnings.append(try ReloginWarning(json: object))
        }
        return warnings
    }
}

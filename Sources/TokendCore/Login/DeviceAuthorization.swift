import TokendJSON

/// A device authorization response (RFC 8628 §3.2).
public struct DeviceAuthorization: Sendable, Hashable, CustomStringConvertible {
    public var deviceCode: SecretString
    public var userCode: String
    public var verificationURI: String
    public var verificationURIComplete: String?
    public var expiresIn: Duration
    /// The polling interval; 5 s when the server names none (§3.2).
    public var interval: Duration

    /// The longest device code lifetime tokend waits for, whatever the server says.
    public static let maximumLifetime: Duration = .seconds(3600)

    public var description: String {
        "DeviceAuthorization(userCode: \(userCode), verificationURI: \(verificationURI), deviceCode: <redacted>)"
    }

    /// Parses the JSON body of a `200` answer from the device authorization endpoint.
    /// - Throws: ``LoginError`` naming the missing or unusable field.
    public static func parse(_ body: [UInt8]) throws(LoginError) -> DeviceAuthorization {
        guard case .object(let object)? = try? JSONParser.parse(body) else {
            throw LoginError("the device authorization endpoint did not answer with a JSON object")
        }
        func text(_ key: String, limit: Int = 2048) throws(LoginError) -> String {
            guard let value = object[key]?.stringValue, !value.isEmpty, value.utf8.count <= limit,
                value.utf8.allSatisfy({ $0 >= 0x21 && $0 <= 0x7E })
            else { throw LoginError("the device authorization response has no usable \(key)") }
            return value
        }
        let deviceCode = try text("device_code", limit: 4096)
        let userCode = try text("user_code", limit: 64)
        // Some servers (Google) call it verification_url.
        let uri = object["verification_uri"] != nil ? try text("verification_uri") : try text("verification_url")
        guard ParsedURL(uri) != nil else { throw LoginError("the device authorization response's verification_uri is not a URL") }
        let complete = object["verification_uri_complete"] == nil ? nil : try text("verification_uri_complete")
        guard let expires = object["expires_in"]?.int64Value, expires > 0 else {
            throw LoginError("the device authorization response has no usable expires_in")
        }
        var interval: Int64 = 5
        if let value = object["interval"], !value.isNull {
            guard let seconds = value.int64Value, seconds >= 0, seconds <= 600 else {
                throw LoginError("the device authorization response's interval is not a number of seconds")
            }
            interval = max(seconds, 1)
        }
        return DeviceAuthorization(
            deviceCode: SecretString(deviceCode), userCode: userCode, verificationURI: uri, verificationURIComplete: complete,
            expiresIn: min(.seconds(expires), maximumLifetime), interval: .seconds(interval)
        )
    }
}

/// The device flow's polling (RFC 8628 §3.4, §3.5) as a state machine: each token endpoint
/// answer in, the next step out.
public struct DevicePolling: Sendable, Hashable {
    /// The wait before the next poll; grows by 5 s on every `slow_down`.
    public private(set) var interval: Duration
    /// How many `slow_down` answers came.
    public private(set) var slowDowns = 0

    public enum Step: Sendable, Hashable {
        /// Tokens: the user approved.
        case success(TokenResponse)
        /// Poll again after this long.
        case wait(Duration)
        /// The login is over without tokens.
        case fail(LoginError)
    }

    public init(interval: Duration) { self.interval = interval }

    /// The step after the token endpoint answered `status` with `body`.
    public mutating func next(status: Int, body: [UInt8]) -> Step {
        if status == 200 {
            do {
                return .success(try TokenResponse.parse(body))
            } catch {
                return .fail(LoginError("the token endpoint answered 200 with an unusable body: \(error)"))
            }
        }
        guard let error = TokenErrorResponse.parse(body) else {
            // A server error or a proxy's page: worth polling again until the code expires.
            return .wait(interval)
        }
        switch error.error {
        case "authorization_pending":
            return .wait(interval)
        case "slow_down":
            slowDowns += 1
            interval += .seconds(5)
            return .wait(interval)
        case "access_denied":
            return .fail(LoginError("the login was denied at the provider", oauthError: error.error))
        case "expired_token":
            return .fail(LoginError("the device code expired before the login was approved; start a new login", oauthError: error.error))
        default:
            let detail = error.errorDescription.map { ": \($0)" } ?? ""
            return .fail(LoginError("the token endpoint refused the device code (\(error.error))\(detail)", oauthError: error.error))
        }
    }

    /// The step when the token endpoint could not be reached: RFC 8628 §3.5 asks clients to
    /// poll less often after a connection timeout, so the interval doubles (up to a minute).
    public mutating func transportFailure() -> Step {
        interval = min(interval * 2, max(interval, .seconds(60)))
        return .wait(interval)
    }
}

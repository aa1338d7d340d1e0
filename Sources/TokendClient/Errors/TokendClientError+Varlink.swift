import TokendJSON
import TokendProtocol

extension TokendClientError.Code {
    /// The code for a Varlink error name: the `io.tokend.TokenProvider` errors by name, the
    /// standard `org.varlink.service` errors by kind, and ``other`` for anything else.
    public init(varlinkErrorName name: String) {
        // Matched by name with a default, so errors added to the interface later map to
        // `other` until the client learns them, rather than breaking the build.
        switch name {
        case TokendErrorName.unknownUser.rawValue: self = .unknownUser
        case TokendErrorName.permissionDenied.rawValue: self = .permissionDenied
        case TokendErrorName.reauthenticationRequired.rawValue: self = .reauthenticationRequired
        case TokendErrorName.refreshFailed.rawValue: self = .refreshFailed
        case TokendErrorName.credentialExists.rawValue: self = .credentialExists
        case TokendErrorName.unknownProvider.rawValue: self = .unknownProvider
        case TokendErrorName.invalidCredential.rawValue: self = .invalidCredential
        case TokendErrorName.storageFailed.rawValue: self = .storageFailed
        case TokendErrorName.keyRotationUnavailable.rawValue: self = .keyRotationUnavailable
        case TokendErrorName.configurationInvalid.rawValue: self = .configurationInvalid
        case TokendErrorName.loginFailed.rawValue: self = .loginFailed
        case TokendErrorName.unknownLogin.rawValue: self = .unknownLogin
        case TokendErrorName.quotaExceeded.rawValue: self = .quotaExceeded
        // The daemon could not read our message: a client/daemon mismatch.
        case TokendErrorName.invalidMessage.rawValue: self = .protocolError
        case "org.varlink.service.InvalidParameter": self = .invalidParameter
        case "org.varlink.service.MethodNotFound", "org.varlink.service.MethodNotImplemented",
            "org.varlink.service.InterfaceNotFound":
            self = .methodNotFound
        case "org.varlink.service.ExpectedMore": self = .expectedMore
        case "org.varlink.service.PermissionDenied": self = .permissionDenied
        default: self = .other
        }
    }
}

extension TokendClientError {
    /// The error for a Varlink error reply to `call`.
    ///
    /// - Parameters:
    ///   - name: the reply's error name.
    ///   - parameters: the reply's parameters.
    ///   - call: the call it answers; its user identifier fills in a missing one, and every
    ///     secret it carried (`accessToken`, `refreshToken`, `rejectedToken`) is redacted from
    ///     the message and the parameters, whatever the daemon sent back.
    public init(
        varlinkErrorName name: String,
        parameters: JSONObject,
        call: VarlinkCall,
        file: String = #fileID,
        line: Int = #line
    ) {
        let secrets = Redaction.secrets(of: call)
        let parameters = Redaction.redact(parameters, secrets: secrets)
        let code = Code(varlinkErrorName: name)
        let text = { (key: String) -> String? in
            parameters[key]?.stringValue.map { Redaction.display($0, secrets: secrets) }
        }
        let user =
            (text("userIdentifier")
                ?? call.parameters["userIdentifier"]?.stringValue.map { Redaction.display($0, secrets: secrets) })
        let userPhrase = user.map { "user '\($0)'" } ?? "the user"
        let reason = text("reason").map { ": \($0)" } ?? ""
        let method = Redaction.display(call.method, secrets: secrets)
        let message: String
        switch code {
        case .unknownUser:
            message = "tokend has no credential for \(userPhrase)"
        case .permissionDenied:
            message =
                (user.map { "permission denied: tokend does not let this caller use the credential of user '\($0)'" }
                    ?? "permission denied: tokend does not let this caller call \(method)") + reason
        case .reauthenticationRequired:
            message = "the login of \(userPhrase) has ended and needs a new login\(reason)"
        case .refreshFailed:
            var text = "tokend could not get a fresh enough token for \(userPhrase)\(reason)"
            if let retryAt = parameters["retryAt"]?.int64Value {
                let wait = retryAt - WallClock.nowSeconds()
                text += wait > 0 ? " (next attempt in \(DurationText.format(seconds: wait)))" : " (next attempt now)"
            }
            message = text
        case .credentialExists:
            message = "tokend already has a credential for \(userPhrase)"
        case .unknownProvider:
            let provider =
                text("provider")
                ?? call.parameters["provider"]?.stringValue.map { Redaction.display($0, secrets: secrets) }
            message = "tokend has no provider named '\(provider ?? "?")'"
        case .invalidCredential:
            message = "tokend refused the credential\(reason)"
        case .storageFailed:
            message = "tokend's credential store failed\(reason)"
        case .keyRotationUnavailable:
            message = "tokend cannot rotate its key\(reason)"
        case .configurationInvalid:
            message = "tokend refused the configuration and keeps the one it had\(reason)"
        case .loginFailed:
            message = "the login of \(userPhrase) failed\(reason)"
        case .unknownLogin:
            message = "tokend has no login in progress with that id for this caller (it expired, was completed or was cancelled)"
        case .quotaExceeded:
            let limit = parameters["limit"]?.int64Value.map { " (\($0))" } ?? ""
            message = "tokend refused \(method): this user has reached the quota \(text("quota") ?? "?")\(limit)"
        case .invalidParameter:
            message = "tokend refused parameter '\(text("parameter") ?? "?")' of \(method)"
        case .methodNotFound:
            if let interface = text("interface") {
                message = "tokend does not provide interface \(interface)"
            } else {
                message = "tokend does not implement \(text("method") ?? method)"
            }
        case .expectedMore:
            message = "tokend expects \(method) to be called with 'more'"
        case .protocolError:
            message = "tokend could not read the call to \(method)\(reason)"
        default:
            message = "tokend answered \(method) with error \(Redaction.display(name, secrets: secrets))"
        }
        self.init(
            code: code,
            message: message,
            errorName: name,
            parameters: parameters,
            method: call.method,
            file: file,
            line: line
        )
    }
}

/// Keeps secrets and terminal control sequences out of error messages (and, package-internal,
/// out of what `tokenctl` prints).
package enum Redaction {
    static let placeholder = "<redacted>"

    /// The parameters of `call` that are secrets.
    static func secrets(of call: VarlinkCall) -> [String] {
        ["accessToken", "refreshToken", "rejectedToken"].compactMap { key in
            guard let value = call.parameters[key]?.stringValue, !value.isEmpty else { return nil }
            return value
        }
    }

    /// `text` with every secret replaced, control characters dropped, and at most 300 characters.
    package static func display(_ text: String, secrets: [String]) -> String {
        var text = text
        for secret in secrets where text.contains(secret) {
            text = text.replacing(secret, with: placeholder)
        }
        let printable = text.unicodeScalars.filter { scalar in
            !(scalar.value < 0x20 || (scalar.value >= 0x7F && scalar.value < 0xA0))
        }
        var result = String(String.UnicodeScalarView(printable))
        if result.count > 300 { result = String(result.prefix(300)) + "..." }
        return result
    }

    /// `parameters` with every string that contains a secret redacted, at any depth.
    static func redact(_ parameters: JSONObject, secrets: [String]) -> JSONObject {
        guard !secrets.isEmpty else { return parameters }
        var result = parameters
        for (key, value) in parameters.members {
            result[key] = redact(value, secrets: secrets)
        }
        return result
    }

    private static func redact(_ value: JSONValue, secrets: [String]) -> JSONValue {
        switch value {
        case .string(let text):
            return secrets.contains(where: { text.contains($0) }) ? .string(placeholder) : value
        case .array(let elements):
            return .array(elements.map { redact($0, secrets: secrets) })
        case .object(let object):
            return .object(redact(object, secrets: secrets))
        default:
            return value
        }
    }
}

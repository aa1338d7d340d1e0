import TokendJSON

/// An error reply: a fully qualified error name and its parameters.
public struct VarlinkError: Error, Sendable, Hashable, CustomStringConvertible {
    public var name: String
    public var parameters: JSONObject

    public init(name: String, parameters: JSONObject = [:]) {
        self.name = name
        self.parameters = parameters
    }

    public var description: String {
        parameters.isEmpty ? name : "\(name) \(JSONWriter.string(.object(parameters)))"
    }

    // MARK: org.varlink.service

    public static func interfaceNotFound(_ interface: some StringProtocol) -> VarlinkError {
        VarlinkError(name: "org.varlink.service.InterfaceNotFound", parameters: ["interface": .string(String(interface))])
    }
    public static func methodNotFound(_ method: String) -> VarlinkError {
        VarlinkError(name: "org.varlink.service.MethodNotFound", parameters: ["method": .string(method)])
    }
    public static func methodNotImplemented(_ method: String) -> VarlinkError {
        VarlinkError(name: "org.varlink.service.MethodNotImplemented", parameters: ["method": .string(method)])
    }
    public static func invalidParameter(_ parameter: String) -> VarlinkError {
        VarlinkError(name: "org.varlink.service.InvalidParameter", parameters: ["parameter": .string(parameter)])
    }
    public static let expectedMore = VarlinkError(name: "org.varlink.service.ExpectedMore")
    public static let servicePermissionDenied = VarlinkError(name: "org.varlink.service.PermissionDenied")
}

/// The errors of `io.tokend.TokenProvider`, by their stable wire names.
public enum TokendErrorName: String, Sendable, CaseIterable {
    case unknownUser = "io.tokend.TokenProvider.UnknownUser"
    case permissionDenied = "io.tokend.TokenProvider.PermissionDenied"
    case reauthenticationRequired = "io.tokend.TokenProvider.ReauthenticationRequired"
    case refreshFailed = "io.tokend.TokenProvider.RefreshFailed"
    case credentialExists = "io.tokend.TokenProvider.CredentialExists"
    case unknownProvider = "io.tokend.TokenProvider.UnknownProvider"
    case invalidCredential = "io.tokend.TokenProvider.InvalidCredential"
    case storageFailed = "io.tokend.TokenProvider.StorageFailed"
    case keyRotationUnavailable = "io.tokend.TokenProvider.KeyRotationUnavailable"
    case invalidMessage = "io.tokend.TokenProvider.InvalidMessage"
    case loginFailed = "io.tokend.TokenProvider.LoginFailed"
    case unknownLogin = "io.tokend.TokenProvider.UnknownLogin"
    case quotaExceeded = "io.tokend.TokenProvider.QuotaExceeded"
    case configurationInvalid = "io.tokend.TokenProvider.ConfigurationInvalid"
}

extension VarlinkError {
    public static func unknownUser(_ userIdentifier: String) -> VarlinkError {
        VarlinkError(name: TokendErrorName.unknownUser.rawValue, parameters: ["userIdentifier": .string(userIdentifier)])
    }
    /// - Parameter reason: why, when it is not simply that the caller is not among the readers or
    ///   managers (a name the configuration reserves, a provider without self-enrolment).
    public static func permissionDenied(_ userIdentifier: String?, reason: String? = nil) -> VarlinkError {
        var parameters: JSONObject = [:]
        parameters.setIfPresent("userIdentifier", userIdentifier.map(JSONValue.string))
        parameters.setIfPresent("reason", reason.map(JSONValue.string))
        return VarlinkError(name: TokendErrorName.permissionDenied.rawValue, parameters: parameters)
    }
    public static func reauthenticationRequired(_ userIdentifier: String, reason: String) -> VarlinkError {
        VarlinkError(
            name: TokendErrorName.reauthenticationRequired.rawValue,
            parameters: ["userIdentifier": .string(userIdentifier), "reason": .string(reason)])
    }
    public static func refreshFailed(_ userIdentifier: String, reason: String, retryAt: Int64?) -> VarlinkError {
        var parameters: JSONObject = ["userIdentifier": .string(userIdentifier), "reason": .string(reason)]
        if let retryAt { parameters["retryAt"] = .int(retryAt) }
        return VarlinkError(name: TokendErrorName.refreshFailed.rawValue, parameters: parameters)
    }
    public static func credentialExists(_ userIdentifier: String) -> VarlinkError {
        VarlinkError(name: TokendErrorName.credentialExists.rawValue, parameters: ["userIdentifier": .string(userIdentifier)])
    }
    public static func unknownProvider(_ provider: String) -> VarlinkError {
        VarlinkError(name: TokendErrorName.unknownProvider.rawValue, parameters: ["provider": .string(provider)])
    }
    public static func invalidCredential(_ reason: String) -> VarlinkError {
        VarlinkError(name: TokendErrorName.invalidCredential.rawValue, parameters: ["reason": .string(reason)])
    }
    public static func storageFailed(_ reason: String) -> VarlinkError {
        VarlinkError(name: TokendErrorName.storageFailed.rawValue, parameters: ["reason": .string(reason)])
    }
    public static func invalidMessage(_ reason: String) -> VarlinkError {
        VarlinkError(name: TokendErrorName.invalidMessage.rawValue, parameters: ["reason": .string(reason)])
    }
    /// A per-uid limit refused the call or the connection: `quota` names it (as in the
    /// configuration, without `max_`), `limit` is its value.
    public static func quotaExceeded(_ quota: String, limit: Int, userIdentifier: String? = nil) -> VarlinkError {
        var parameters: JSONObject = ["quota": .string(quota), "limit": .int(Int64(limit))]
        if let userIdentifier { parameters["userIdentifier"] = .string(userIdentifier) }
        return VarlinkError(name: TokendErrorName.quotaExceeded.rawValue, parameters: parameters)
    }
    public static func keyRotationUnavailable(_ reason: String) -> VarlinkError {
        VarlinkError(name: TokendErrorName.keyRotationUnavailable.rawValue, parameters: ["reason": .string(reason)])
    }
    /// `Reload`: the configuration file does not load; `reason` names the file, the key and
    /// the problem.
    public static func configurationInvalid(_ reason: String) -> VarlinkError {
        VarlinkError(name: TokendErrorName.configurationInvalid.rawValue, parameters: ["reason": .string(reason)])
    }
}

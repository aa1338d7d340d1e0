/// The methods of `org.varlink.service` that tokend serves, by their wire names.
public enum VarlinkServiceMethod: String, Sendable, CaseIterable {
    case getInfo = "org.varlink.service.GetInfo"
    case getInterfaceDescription = "org.varlink.service.GetInterfaceDescription"
}

/// Every method tokend serves: those of `io.tokend.TokenProvider` and of `org.varlink.service`.
///
/// A call's method string is parsed into this once; the daemon routes, authorises, orders and
/// counts the call by a `switch` over it, and each case has one ``MethodDescriptor`` (see
/// ``descriptor``), so that a method added here without a route or a descriptor does not compile.
public enum ServedMethod: Sendable, Hashable, CaseIterable, CustomStringConvertible {
    case tokenProvider(TokenProviderMethod)
    case varlinkService(VarlinkServiceMethod)

    public static let allCases: [ServedMethod] =
        TokenProviderMethod.allCases.map(ServedMethod.tokenProvider) + VarlinkServiceMethod.allCases.map(ServedMethod.varlinkService)

    /// The method named `name` (fully qualified, `interface.Method`), or nil when tokend does
    /// not serve it (``notServed(_:)`` says how to answer).
    ///
    /// `ProvideTokenReplacement`, the call that must be fast, is the first comparison.
    public init?(_ name: String) {
        if let method = TokenProviderMethod(rawValue: name) {
            self = .tokenProvider(method)
        } else if let method = VarlinkServiceMethod(rawValue: name) {
            self = .varlinkService(method)
        } else {
            return nil
        }
    }

    /// The fully qualified name, as a call carries it.
    public var name: String {
        switch self {
        case .tokenProvider(let method): method.rawValue
        case .varlinkService(let method): method.rawValue
        }
    }

    /// The name without its interface: `ProvideTokenReplacement`, `GetInfo`, …
    public var memberName: Substring {
        let name = name
        guard let dot = name.lastIndex(of: ".") else { return Substring(name) }
        return name[name.index(after: dot)...]
    }

    public var description: String { name }

    /// The answer to a call of `name` that tokend does not serve: `MethodNotFound` for a method
    /// of an interface it serves, else `InterfaceNotFound`.
    public static func notServed(_ name: String) -> VarlinkError {
        let interface = VarlinkCall(method: name).interface
        if interface == TokenProviderInterface.name || interface == VarlinkServiceInterface.name {
            return .methodNotFound(name)
        }
        return .interfaceNotFound(interface)
    }
}

import TokendJSON

/// What a program asked a token to be narrowed to (RFC 6749 §6 `scope`, RFC 8707 `resource`):
/// a subset of the credential's scope, an API the token is for, or both.
///
/// Normalised so that the same request always has the same ``key``: scope values are sorted and
/// deduplicated ("write read" and "read write read" are one narrowed token).
public struct TokenNarrowing: Sendable, Hashable, CustomStringConvertible {
    /// The scope values asked for, sorted and distinct; nil when only a resource was asked for.
    public let scopeValues: [String]?
    /// The resource indicator: an absolute URI without fragment.
    public let resource: String?

    /// At most this many scope values (a request is a handful; a flood is bad input).
    public static let maxScopeValues = 32
    /// The longest `scope` and `resource` accepted, in bytes.
    public static let maxLength = 2048

    /// Parses the call's parameters; nil when neither is given (the credential's own token).
    /// - Throws: ``NarrowingParameterError`` naming the parameter that is malformed.
    public init?(scope: String?, resource: String?) throws(NarrowingParameterError) {
        guard scope != nil || resource != nil else { return nil }
        if let scope {
            guard scope.utf8.count <= Self.maxLength else {
                throw NarrowingParameterError(parameter: "scope", problem: "longer than \(Self.maxLength) bytes")
            }
            let values = Set(scope.split(separator: " ").map(String.init))
            guard !values.isEmpty else { throw NarrowingParameterError(parameter: "scope", problem: "empty") }
            guard values.count <= Self.maxScopeValues else {
                throw NarrowingParameterError(parameter: "scope", problem: "more than \(Self.maxScopeValues) values")
            }
            // RFC 6749 §3.3: scope-token = 1*( %x21 / %x23-5B / %x5D-7E ).
            guard values.allSatisfy(Self.isScopeToken) else {
                throw NarrowingParameterError(parameter: "scope", problem: "a value has a character RFC 6749 §3.3 does not allow")
            }
            scopeValues = values.sorted()
        } else {
            scopeValues = nil
        }
        if let resource {
            guard resource.utf8.count <= Self.maxLength else {
                throw NarrowingParameterError(parameter: "resource", problem: "longer than \(Self.maxLength) bytes")
            }
            guard Self.isResourceIndicator(resource) else {
                throw NarrowingParameterError(parameter: "resource", problem: "not an absolute URI without fragment (RFC 8707 §2)")
            }
        }
        self.resource = resource
    }

    /// The scope as sent to the provider, values separated by spaces.
    public var scope: String? { scopeValues?.joined(separator: " ") }

    /// One string per distinct request: the cache's and the store's key.
    public var key: String { "\(scope ?? "")\u{1F}\(resource ?? "")" }

    public var description: String {
        [scope.map { "scope '\($0)'" }, resource.map { "resource '\($0)'" }].compactMap { $0 }.joined(separator: " and ")
    }

    static func isScopeToken(_ value: String) -> Bool {
        !value.isEmpty && value.utf8.allSatisfy { $0 == 0x21 || (0x23...0x5B).contains($0) || (0x5D...0x7E).contains($0) }
    }

    /// RFC 8707 §2: an absolute URI (a scheme, then `:`), printable ASCII without spaces, no
    /// fragment.
    static func isResourceIndicator(_ value: String) -> Bool {
        guard let colon = value.firstIndex(of: ":"), colon != value.startIndex else { return false }
        let scheme = value[..<colon]
        guard let first = scheme.utf8.first, (0x41...0x5A).contains(first) || (0x61...0x7A).contains(first),
            scheme.utf8.allSatisfy({ $0.isASCIIAlphanumeric || $0 == 0x2B || $0 == 0x2D || $0 == 0x2E })
        else { return false }
        let rest = value[value.index(after: colon)...]
        return !rest.isEmpty && !value.contains("#") && value.utf8.allSatisfy { (0x21...0x7E).contains($0) }
    }
}

extension UInt8 {
    fileprivate var isASCIIAlphanumeric: Bool {
        (0x30...0x39).contains(self) || (0x41...0x5A).contains(self) || (0x61...0x7A).contains(self)
    }
}

/// A `scope` or `resource` parameter that cannot be a narrowing request.
public struct NarrowingParameterError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The parameter's name, for `InvalidParameter`.
    public let parameter: String
    public let problem: String

    public var description: String { "\(parameter): \(problem)" }
}

/// Whether tokend may ask for a narrowed token, and whether the answer is one: the two checks
/// that keep a narrowed token from ever being wider than its credential or than what was asked.
public enum NarrowingRules {
    /// Why `narrowing` cannot be asked of a credential whose tokens carry `grantedScope`, or
    /// nil if it can. A credential whose scope is unknown cannot be narrowed by scope: tokend
    /// could not tell a subset from a widening.
    public static func refusal(of narrowing: TokenNarrowing, grantedScope: String?) -> String? {
        guard let asked = narrowing.scopeValues else { return nil }
        guard let grantedScope else {
            return "the credential's scope is unknown (its provider did not say), so no narrower scope can be checked against it"
        }
        let granted = Set(grantedScope.split(separator: " ").map(String.init))
        let extra = asked.filter { !granted.contains($0) }
        guard extra.isEmpty else {
            return
                "scope '\(extra.joined(separator: " "))' is not among the credential's scope '\(grantedScope)'; a narrowed token is never wider"
        }
        return nil
    }

    /// Why the provider's answer to a narrowed grant is not the token asked for, or nil if it
    /// is. Every statement of the scope granted must be within the scope asked: the response's
    /// `scope`, and a JWT's `scope` and `scp` claims (RFC 9068, or a list); with none, the scope
    /// asked was granted (RFC 6749 §5.1). A JWT whose `aud` does not name the asked resource was
    /// not narrowed to it; an opaque token is taken at its word.
    public static func problem(with narrowing: TokenNarrowing, responseScope: String?, accessToken: String) -> String? {
        let claims = NarrowingClaims(jwt: accessToken)
        if let asked = narrowing.scopeValues {
            let statements = [responseScope.map { $0.split(separator: " ").map(String.init) }, claims?.scope, claims?.scp]
            for granted in statements.compactMap({ $0 }) where !Set(granted).subtracting(asked).isEmpty {
                return
                    "the provider answered with scope '\(granted.joined(separator: " "))', wider than the requested '\(asked.joined(separator: " "))': it does not narrow tokens on refresh"
            }
        }
        if let resource = narrowing.resource, let audiences = claims?.audiences, !audiences.contains(resource) {
            return "the provider's token is for audience '\(audiences.joined(separator: " "))', not the requested resource '\(resource)'"
        }
        return nil
    }

    /// Whether a main grant's answer came back with less scope than the credential had: the
    /// provider narrowed the refresh token itself after a narrowed grant, which RFC 6749 §6
    /// forbids ("the new refresh token's scope MUST be identical"). Returns the scope lost.
    public static func scopeLost(before: String?, after: String?) -> [String]? {
        guard let before, let after else { return nil }
        let kept = Set(after.split(separator: " ").map(String.init))
        let lost = before.split(separator: " ").map(String.init).filter { !kept.contains($0) }
        return lost.isEmpty ? nil : lost
    }
}

/// The `scope` and `aud` claims of a JWT access token (RFC 9068 §2.2), unverified: used only to
/// refuse a token that is wider than asked, never to accept one.
struct NarrowingClaims {
    /// `scope`: a space-separated string (RFC 9068), or a list as some providers write it.
    var scope: [String]?
    /// `scp`, the same as a list (or a string).
    var scp: [String]?
    var audiences: [String]?

    init?(jwt token: String) {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let payload = Base64URL.decode(parts[1]),
            case .object(let claims)? = try? JSONParser.parse(payload)
        else { return nil }
        func values(_ claim: JSONValue?) -> [String]? {
            switch claim {
            case .string(let text): text.split(separator: " ").map(String.init)
            case .array(let items): items.compactMap(\.stringValue)
            default: nil
            }
        }
        scope = values(claims["scope"])
        scp = values(claims["scp"])
        switch claims["aud"] {
        case .string(let audience): audiences = [audience]
        case .array(let values): audiences = values.compactMap(\.stringValue)
        default: audiences = nil
        }
    }
}

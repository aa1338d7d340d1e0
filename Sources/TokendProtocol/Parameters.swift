import TokendJSON

/// Reads typed parameters out of a call, turning every missing or mistyped one into
/// `org.varlink.service.InvalidParameter` naming it.
public struct ParameterReader: Sendable {
    public let parameters: JSONObject

    public init(_ parameters: JSONObject) { self.parameters = parameters }

    public func string(_ name: String) throws(VarlinkError) -> String {
        guard let value = try optionalString(name) else { throw .invalidParameter(name) }
        return value
    }

    public func optionalString(_ name: String) throws(VarlinkError) -> String? {
        switch parameters[name] {
        case nil, .null?: return nil
        case .string(let s)?: return s
        default: throw .invalidParameter(name)
        }
    }

    public func int(_ name: String) throws(VarlinkError) -> Int64 {
        guard let value = try optionalInt(name) else { throw .invalidParameter(name) }
        return value
    }

    public func optionalInt(_ name: String) throws(VarlinkError) -> Int64? {
        switch parameters[name] {
        case nil, .null?: return nil
        case let value?:
            guard let i = value.int64Value else { throw .invalidParameter(name) }
            return i
        }
    }

    public func optionalBool(_ name: String) throws(VarlinkError) -> Bool? {
        switch parameters[name] {
        case nil, .null?: return nil
        case .bool(let b)?: return b
        default: throw .invalidParameter(name)
        }
    }

    public func optionalStringArray(_ name: String) throws(VarlinkError) -> [String]? {
        switch parameters[name] {
        case nil, .null?: return nil
        case .array(let elements)?:
            var strings: [String] = []
            strings.reserveCapacity(elements.count)
            for element in elements {
                guard let s = element.stringValue else { throw .invalidParameter(name) }
                strings.append(s)
            }
            return strings
        default: throw .invalidParameter(name)
        }
    }

    public func optionalObject(_ name: String) throws(VarlinkError) -> JSONObject? {
        switch parameters[name] {
        case nil, .null?: return nil
        case .object(let o)?: return o
        default: throw .invalidParameter(name)
        }
    }
}

extension JSONObject {
    /// Sets `key` only when `value` is not nil (Varlink leaves absent optionals out).
    public mutating func setIfPresent(_ key: String, _ value: JSONValue?) {
        if let value { self[key] = value }
    }
}

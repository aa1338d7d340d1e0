/// A JSON value as tokend reads and writes it.
///
/// Objects keep their members in document order as an array of pairs: Varlink messages are
/// small (a handful of members), so a linear scan beats hashing, and order makes output stable.
public enum JSONValue: Sendable, Hashable {
    case null
    case bool(Bool)
    /// An integral number that fits in 64 bits.
    case int(Int64)
    /// Any other number.
    case double(Double)
    case string(String)
    case array([JSONValue])
    case object(JSONObject)
}

/// An ordered JSON object. Keys are unique: the parser rejects duplicates, and `subscript`'s
/// setter replaces an existing member.
public struct JSONObject: Sendable, Hashable, ExpressibleByDictionaryLiteral {
    public private(set) var members: [(key: String, value: JSONValue)]

    public init() { self.members = [] }

    public init(dictionaryLiteral elements: (String, JSONValue)...) {
        self.members = []
        self.members.reserveCapacity(elements.count)
        for (key, value) in elements { self[key] = value }
    }

    /// Builds an object from pairs that are already known to have unique keys.
    init(uniqueMembers: [(key: String, value: JSONValue)]) { self.members = uniqueMembers }

    public var count: Int { members.count }
    public var isEmpty: Bool { members.isEmpty }
    public var keys: [String] { members.map(\.key) }

    public subscript(key: String) -> JSONValue? {
        get {
            for member in members where member.key == key { return member.value }
            return nil
        }
        set {
            if let index = members.firstIndex(where: { $0.key == key }) {
                if let newValue { members[index].value = newValue } else { members.remove(at: index) }
            } else if let newValue {
                members.append((key, newValue))
            }
        }
    }

    public static func == (lhs: JSONObject, rhs: JSONObject) -> Bool {
        guard lhs.members.count == rhs.members.count else { return false }
        for (key, value) in lhs.members where rhs[key] != value { return false }
        return true
    }

    public func hash(into hasher: inout Hasher) {
        // Order-independent, to agree with `==`.
        var combined = 0
        for (key, value) in members {
            var inner = Hasher()
            inner.combine(key)
            inner.combine(value)
            combined ^= inner.finalize()
        }
        hasher.combine(combined)
    }
}

extension JSONValue {
    public var stringValue: String? { if case .string(let s) = self { s } else { nil } }
    public var boolValue: Bool? { if case .bool(let b) = self { b } else { nil } }
    public var objectValue: JSONObject? { if case .object(let o) = self { o } else { nil } }
    public var arrayValue: [JSONValue]? { if case .array(let a) = self { a } else { nil } }
    public var isNull: Bool { if case .null = self { true } else { false } }

    /// The value as a 64-bit integer: integral numbers, and doubles with no fractional part
    /// that fit (`3.0`), since some encoders write every number as a double.
    public var int64Value: Int64? {
        switch self {
        case .int(let i): return i
        case .double(let d):
            guard d.rounded() == d, d >= -9.2e18, d <= 9.2e18 else { return nil }
            return Int64(d)
        default: return nil
        }
    }

    public var doubleValue: Double? {
        switch self {
        case .int(let i): Double(i)
        case .double(let d): d
        default: nil
        }
    }

    /// A short name of the value's type, for error messages ("expected a string, got an array").
    public var typeName: String {
        switch self {
        case .null: "null"
        case .bool: "a boolean"
        case .int, .double: "a number"
        case .string: "a string"
        case .array: "an array"
        case .object: "an object"
        }
    }
}

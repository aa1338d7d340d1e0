import TokendJSON

/// A method call as a Varlink client sends it.
public struct VarlinkCall: Sendable, Hashable {
    /// Fully qualified: `interface.Method`, e.g. `io.tokend.TokenProvider.Status`.
    public var method: String
    public var parameters: JSONObject
    /// The client wants no reply.
    public var oneway: Bool
    /// The client accepts several replies (all but the last flagged `continues`).
    public var more: Bool
    public var upgrade: Bool

    public init(method: String, parameters: JSONObject = [:], oneway: Bool = false, more: Bool = false, upgrade: Bool = false) {
        self.method = method
        self.parameters = parameters
        self.oneway = oneway
        self.more = more
        self.upgrade = upgrade
    }

    /// The interface part of `method` (everything before the last dot).
    public var interface: Substring {
        guard let dot = method.lastIndex(of: ".") else { return "" }
        return method[..<dot]
    }

    /// The member part of `method` (after the last dot).
    public var memberName: Substring {
        guard let dot = method.lastIndex(of: ".") else { return Substring(method) }
        return method[method.index(after: dot)...]
    }
}

/// Why bytes on the socket are not a Varlink call. The server answers these with an error
/// reply where it can and then closes the connection, since the stream can no longer be trusted.
public struct VarlinkDecodingError: Error, Sendable, Hashable, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}

extension VarlinkCall {
    /// Decodes one message (without its NUL terminator).
    public static func decode(_ bytes: some Collection<UInt8>, maximumDepth: Int = JSONParser.defaultMaximumDepth)
        throws(VarlinkDecodingError) -> VarlinkCall
    {
        let value: JSONValue
        do {
            value = try JSONParser.parse(bytes, maximumDepth: maximumDepth)
        } catch {
            throw VarlinkDecodingError("the message is not valid JSON: \(error)")
        }
        guard case .object(let object) = value else {
            throw VarlinkDecodingError("the message is \(value.typeName), not a JSON object")
        }
        guard let method = object["method"]?.stringValue else {
            throw VarlinkDecodingError("the message has no \"method\" string")
        }
        guard isValidMethodName(method) else {
            throw VarlinkDecodingError("\"method\" is not of the form interface.Method")
        }
        var call = VarlinkCall(method: method)
        switch object["parameters"] {
        case nil, .null?: break
        case .object(let parameters)?: call.parameters = parameters
        case let other?: throw VarlinkDecodingError("\"parameters\" is \(other.typeName), not an object")
        }
        for (key, value) in object.members {
            switch key {
            case "method", "parameters": continue
            case "oneway", "more", "upgrade":
                guard !value.isNull else { continue }
                guard let flag = value.boolValue else {
                    throw VarlinkDecodingError("\"\(key)\" is \(value.typeName), not a boolean")
                }
                if key == "oneway" { call.oneway = flag } else if key == "more" { call.more = flag } else { call.upgrade = flag }
            default:
                // Varlink says to ignore unknown fields, for forward compatibility.
                continue
            }
        }
        return call
    }

    /// `reverse.domain.Interface.Method`: at least two dots-separated interface labels, and a
    /// method name starting with an upper-case letter.
    static func isValidMethodName(_ method: String) -> Bool {
        // One pass, no allocation (it runs for every call): labels of word bytes separated by
        // single dots, at least three labels (an interface of two or more, then the member),
        // the member starting with a capital letter.
        let utf8 = method.utf8
        guard utf8.count <= 255 else { return false }
        var dots = 0
        var labelLength = 0
        var labelFirst: UInt8 = 0
        for byte in utf8 {
            if byte == UInt8(ascii: ".") {
                guard labelLength > 0 else { return false }
                dots += 1
                labelLength = 0
            } else {
                guard isWordByte(byte) else { return false }
                if labelLength == 0 { labelFirst = byte }
                labelLength += 1
            }
        }
        return labelLength > 0 && dots >= 2 && labelFirst >= UInt8(ascii: "A") && labelFirst <= UInt8(ascii: "Z")
    }

    private static func isWordByte(_ byte: UInt8) -> Bool {
        (byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "z")) || (byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z"))
            || (byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9")) || byte == UInt8(ascii: "-") || byte == UInt8(ascii: "_")
    }

    /// Encodes the call as a JSON message (without the NUL terminator).
    public func encode(into output: inout [UInt8]) {
        var object: JSONObject = ["method": .string(method)]
        if !parameters.isEmpty { object["parameters"] = .object(parameters) }
        if oneway { object["oneway"] = .bool(true) }
        if more { object["more"] = .bool(true) }
        if upgrade { object["upgrade"] = .bool(true) }
        JSONWriter.write(object, into: &output)
    }
}

import TokendJSON

/// A reply as a Varlink service sends it: parameters, or an error with parameters.
public struct VarlinkReply: Sendable, Hashable {
    public var parameters: JSONObject
    /// The fully qualified error name, when the call failed.
    public var error: String?
    /// More replies follow (only for calls made with `more`).
    public var continues: Bool

    public init(parameters: JSONObject = [:], error: String? = nil, continues: Bool = false) {
        self.parameters = parameters
        self.error = error
        self.continues = continues
    }

    public init(_ error: VarlinkError) {
        self.init(parameters: error.parameters, error: error.name)
    }

    /// Encodes the reply as a JSON message (without the NUL terminator).
    public func encode(into output: inout [UInt8]) {
        output.append(UInt8(ascii: "{"))
        if let error {
            output.append(contentsOf: #""error":"#.utf8)
            JSONWriter.writeString(error, into: &output)
            output.append(UInt8(ascii: ","))
        }
        output.append(contentsOf: #""parameters":"#.utf8)
        JSONWriter.write(parameters, into: &output)
        if continues { output.append(contentsOf: #","continues":true"#.utf8) }
        output.append(UInt8(ascii: "}"))
    }

    /// Decodes one reply message (without its NUL terminator).
    public static func decode(_ bytes: some Collection<UInt8>) throws(VarlinkDecodingError) -> VarlinkReply {
        let value: JSONValue
        do {
            // Replies are trusted more than calls, but a client still must not crash on them.
            value = try JSONParser.parse(bytes, maximumDepth: 64)
        } catch {
            throw VarlinkDecodingError("the reply is not valid JSON: \(error)")
        }
        guard case .object(let object) = value else { throw VarlinkDecodingError("the reply is not a JSON object") }
        var reply = VarlinkReply()
        switch object["parameters"] {
        case nil, .null?: break
        case .object(let parameters)?: reply.parameters = parameters
        default: throw VarlinkDecodingError("the reply's \"parameters\" is not an object")
        }
        switch object["error"] {
        case nil, .null?: break
        case .string(let name)?: reply.error = name
        default: throw VarlinkDecodingError("the reply's \"error\" is not a string")
        }
        reply.continues = object["continues"]?.boolValue ?? false
        return reply
    }
}

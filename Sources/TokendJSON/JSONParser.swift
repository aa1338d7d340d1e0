/// Why a JSON document was rejected, with the byte offset where the parser stopped.
public struct JSONParseError: Error, Sendable, Hashable, CustomStringConvertible {
    public enum Reason: String, Sendable, Hashable {
        case unexpectedEnd = "unexpected end of input"
        case unexpectedCharacter = "unexpected character"
        case invalidNumber = "invalid number"
        case invalidEscape = "invalid escape sequence"
        case invalidUTF8 = "invalid UTF-8"
        case controlCharacterInString = "unescaped control character in string"
        case tooDeep = "nesting too deep"
        case duplicateKey = "duplicate object key"
        case trailingData = "data after the JSON value"
    }

    public var reason: Reason
    public var offset: Int

    public var description: String { "\(reason.rawValue) at byte \(offset)" }
}

/// A strict RFC 8259 parser over UTF-8 bytes.
///
/// Strict on purpose: invalid UTF-8, duplicate keys, lone surrogates and trailing data are
/// errors, and nesting is capped, so hostile input gets a clear error instead of a crash or a
/// stack overflow. It is written for small messages (Varlink calls) and allocates only for the
/// values it returns.
public struct JSONParser {
    /// The deepest nesting of arrays and objects accepted by default.
    public static let defaultMaximumDepth = 64

    public static func parse(_ bytes: some Collection<UInt8>, maximumDepth: Int = defaultMaximumDepth) throws(JSONParseError) -> JSONValue {
        // The error comes out through a variable, not a `Result`: instantiating
        // `Result<JSONValue, JSONParseError>` makes the runtime check `JSONParseError: Error`
        // among every conformance in the executable, which a one-shot `tokenctl token` pays for.
        var failure: JSONParseError?
        let value: JSONValue?? = bytes.withContiguousStorageIfAvailable { buffer in
            do throws(JSONParseError) {
                return try parse(buffer: buffer, maximumDepth: maximumDepth)
            } catch {
                failure = error
                return nil
            }
        }
        if let failure { throw failure }
        if let value, let value { return value }
        let copy = Array(bytes)
        return try copy.withUnsafeBufferPointer { buffer throws(JSONParseError) in
            try parse(buffer: buffer, maximumDepth: maximumDepth)
        }
    }

    public static func parse(_ string: String, maximumDepth: Int = defaultMaximumDepth) throws(JSONParseError) -> JSONValue {
        try parse(Array(string.utf8), maximumDepth: maximumDepth)
    }

    public static func parse(buffer: UnsafeBufferPointer<UInt8>, maximumDepth: Int = defaultMaximumDepth) throws(JSONParseError)
        -> JSONValue
    {
        var reader = Reader(bytes: buffer, maximumDepth: maximumDepth)
        reader.skipWhitespace()
        let value = try reader.readValue(depth: 0)
        reader.skipWhitespace()
        guard reader.index == buffer.count else { throw reader.error(.trailingData) }
        return value
    }
}

private struct Reader {
    let bytes: UnsafeBufferPointer<UInt8>
    let maximumDepth: Int
    var index = 0

    init(bytes: UnsafeBufferPointer<UInt8>, maximumDepth: Int) {
        self.bytes = bytes
        self.maximumDepth = maximumDepth
    }

    func error(_ reason: JSONParseError.Reason) -> JSONParseError { JSONParseError(reason: reason, offset: index) }

    mutating func skipWhitespace() {
        while index < bytes.count {
            switch bytes[index] {
            case 0x20, 0x09, 0x0A, 0x0D: index += 1
            default: return
            }
        }
    }

    func peek() throws(JSONParseError) -> UInt8 {
        guard index < bytes.count else { throw error(.unexpectedEnd) }
        return bytes[index]
    }

    mutating func expectLiteral(_ literal: StaticString, value: JSONValue) throws(JSONParseError) -> JSONValue {
        let count = literal.utf8CodeUnitCount
        guard bytes.count - index >= count else { throw error(.unexpectedEnd) }
        let start = literal.utf8Start
        for offset in 0..<count where bytes[index + offset] != start[offset] {
            index += offset
            throw error(.unexpectedCharacter)
        }
        index += count
        return value
    }

    mutating func readValue(depth: Int) throws(JSONParseError) -> JSONValue {
        switch try peek() {
        case UInt8(ascii: "{"): return try readObject(depth: depth + 1)
        case UInt8(ascii: "["): return try readArray(depth: depth + 1)
        case UInt8(ascii: "\""): return .string(try readString())
        case UInt8(ascii: "t"): return try expectLiteral("true", value: .bool(true))
        case UInt8(ascii: "f"): return try expectLiteral("false", value: .bool(false))
        case UInt8(ascii: "n"): return try expectLiteral("null", value: .null)
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return try readNumber()
        default: throw error(.unexpectedCharacter)
        }
    }

    mutating func readObject(depth: Int) throws(JSONParseError) -> JSONValue {
        guard depth <= maximumDepth else { throw error(.tooDeep) }
        index += 1  // {
        var members: [(key: String, value: JSONValue)] = []
        skipWhitespace()
        if try peek() == UInt8(ascii: "}") {
            index += 1
            return .object(JSONObject(uniqueMembers: members))
        }
        while true {
            skipWhitespace()
            guard try peek() == UInt8(ascii: "\"") else { throw error(.unexpectedCharacter) }
            let keyOffset = index
            let key = try readString()
            // Duplicate keys make a message mean different things to different parsers.
            if members.contains(where: { $0.key == key }) {
                throw JSONParseError(reason: .duplicateKey, offset: keyOffset)
            }
            skipWhitespace()
            guard try peek() == UInt8(ascii: ":") else { throw error(.unexpectedCharacter) }
            index += 1
            skipWhitespace()
            let value = try readValue(depth: depth)
            members.append((key, value))
            skipWhitespace()
            switch try peek() {
            case UInt8(ascii: ","): index += 1
            case UInt8(ascii: "}"):
                index += 1
                return .object(JSONObject(uniqueMembers: members))
            default: throw error(.unexpectedCharacter)
            }
        }
    }

    mutating func readArray(depth: Int) throws(JSONParseError) -> JSONValue {
        guard depth <= maximumDepth else { throw error(.tooDeep) }
        index += 1  // [
        var elements: [JSONValue] = []
        skipWhitespace()
        if try peek() == UInt8(ascii: "]") {
            index += 1
            return .array(elements)
        }
        while true {
            skipWhitespace()
            elements.append(try readValue(depth: depth))
            skipWhitespace()
            switch try peek() {
            case UInt8(ascii: ","): index += 1
            case UInt8(ascii: "]"):
                index += 1
                return .array(elements)
            default: throw error(.unexpectedCharacter)
            }
        }
    }

    mutating func readNumber() throws(JSONParseError) -> JSONValue {
        let start = index
        var isIntegral = true
        if bytes[index] == UInt8(ascii: "-") { index += 1 }
        guard index < bytes.count else { throw error(.invalidNumber) }
        if bytes[index] == UInt8(ascii: "0") {
            index += 1
        } else if (UInt8(ascii: "1")...UInt8(ascii: "9")).contains(bytes[index]) {
            while index < bytes.count, isDigit(bytes[index]) { index += 1 }
        } else {
            throw error(.invalidNumber)
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
            isIntegral = false
            index += 1
            guard index < bytes.count, isDigit(bytes[index]) else { throw error(.invalidNumber) }
            while index < bytes.count, isDigit(bytes[index]) { index += 1 }
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") {
            isIntegral = false
            index += 1
            if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") { index += 1 }
            guard index < bytes.count, isDigit(bytes[index]) else { throw error(.invalidNumber) }
            while index < bytes.count, isDigit(bytes[index]) { index += 1 }
        }
        let text = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)
        if isIntegral, let value = Int64(text) { return .int(value) }
        guard let value = Double(text), value.isFinite else {
            throw JSONParseError(reason: .invalidNumber, offset: start)
        }
        return .double(value)
    }

    func isDigit(_ byte: UInt8) -> Bool { byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") }

    mutating func readString() throws(JSONParseError) -> String {
        index += 1  // opening quote
        let start = index
        // Fast path: no escapes. Scan to the closing quote, then validate UTF-8 once.
        while index < bytes.count {
            let byte = bytes[index]
            if byte == UInt8(ascii: "\"") {
                let slice = UnsafeBufferPointer(rebasing: bytes[start..<index])
                guard let string = String(validating: slice, as: UTF8.self) else {
                    throw JSONParseError(reason: .invalidUTF8, offset: start)
                }
                index += 1
                return string
            }
            if byte == UInt8(ascii: "\\") { break }
            if byte < 0x20 { throw error(.controlCharacterInString) }
            index += 1
        }
        guard index < bytes.count else { throw error(.unexpectedEnd) }
        // Slow path: the string has escapes.
        var utf8: [UInt8] = Array(UnsafeBufferPointer(rebasing: bytes[start..<index]))
        while index < bytes.count {
            let byte = bytes[index]
            switch byte {
            case UInt8(ascii: "\""):
                guard let string = String(validating: utf8, as: UTF8.self) else {
                    throw JSONParseError(reason: .invalidUTF8, offset: start)
                }
                index += 1
                return string
            case UInt8(ascii: "\\"):
                index += 1
                try readEscape(into: &utf8)
            case 0..<0x20:
                throw error(.controlCharacterInString)
            default:
                utf8.append(byte)
                index += 1
            }
        }
        throw error(.unexpectedEnd)
    }

    mutating func readEscape(into utf8: inout [UInt8]) throws(JSONParseError) {
        let byte = try peek()
        index += 1
        switch byte {
        case UInt8(ascii: "\""): utf8.append(UInt8(ascii: "\""))
        case UInt8(ascii: "\\"): utf8.append(UInt8(ascii: "\\"))
        case UInt8(ascii: "/"): utf8.append(UInt8(ascii: "/"))
        case UInt8(ascii: "b"): utf8.append(0x08)
        case UInt8(ascii: "f"): utf8.append(0x0C)
        case UInt8(ascii: "n"): utf8.append(0x0A)
        case UInt8(ascii: "r"): utf8.append(0x0D)
        case UInt8(ascii: "t"): utf8.append(0x09)
        case UInt8(ascii: "u"):
            var scalar = UInt32(try readHex4())
            if (0xD800...0xDBFF).contains(scalar) {
                // A high surrogate must be followed by an escaped low surrogate.
                guard bytes.count - index >= 2, bytes[index] == UInt8(ascii: "\\"), bytes[index + 1] == UInt8(ascii: "u") else {
                    throw error(.invalidEscape)
                }
                index += 2
                let low = UInt32(try readHex4())
                guard (0xDC00...0xDFFF).contains(low) else { throw error(.invalidEscape) }
                scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
            } else if (0xDC00...0xDFFF).contains(scalar) {
                throw error(.invalidEscape)
            }
            guard let unicode = Unicode.Scalar(scalar) else { throw error(.invalidEscape) }
            utf8.append(contentsOf: UTF8.encode(unicode)!)
        default:
            index -= 1
            throw error(.invalidEscape)
        }
    }

    mutating func readHex4() throws(JSONParseError) -> UInt16 {
        guard bytes.count - index >= 4 else { throw error(.unexpectedEnd) }
        var value: UInt16 = 0
        for _ in 0..<4 {
            let byte = bytes[index]
            let digit: UInt8
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
            default: throw error(.invalidEscape)
            }
            value = value << 4 | UInt16(digit)
            index += 1
        }
        return value
    }
}

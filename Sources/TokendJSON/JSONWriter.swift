/// Serialises `JSONValue`s as compact UTF-8 JSON.
///
/// Output has no insignificant whitespace, and escapes `"`, `\` and control characters (and
/// nothing else), so it is stable and as short as JSON allows.
public enum JSONWriter {
    /// Appends the JSON text of `value` to `output`.
    public static func write(_ value: JSONValue, into output: inout [UInt8]) {
        switch value {
        case .null: output.append(contentsOf: "null".utf8)
        case .bool(let b): output.append(contentsOf: (b ? "true" : "false").utf8)
        case .int(let i): writeInteger(i, into: &output)
        case .double(let d): writeDouble(d, into: &output)
        case .string(let s): writeString(s, into: &output)
        case .array(let elements):
            output.append(UInt8(ascii: "["))
            for (offset, element) in elements.enumerated() {
                if offset > 0 { output.append(UInt8(ascii: ",")) }
                write(element, into: &output)
            }
            output.append(UInt8(ascii: "]"))
        case .object(let object):
            write(object, into: &output)
        }
    }

    /// Appends the JSON text of `object` to `output`.
    public static func write(_ object: JSONObject, into output: inout [UInt8]) {
        output.append(UInt8(ascii: "{"))
        for (offset, member) in object.members.enumerated() {
            if offset > 0 { output.append(UInt8(ascii: ",")) }
            writeString(member.key, into: &output)
            output.append(UInt8(ascii: ":"))
            write(member.value, into: &output)
        }
        output.append(UInt8(ascii: "}"))
    }

    /// The JSON text of `value` as a string.
    public static func string(_ value: JSONValue) -> String {
        var output: [UInt8] = []
        write(value, into: &output)
        return String(decoding: output, as: UTF8.self)
    }

    public static func writeInteger(_ value: Int64, into output: inout [UInt8]) {
        if value == 0 {
            output.append(UInt8(ascii: "0"))
            return
        }
        // Digits into a small stack buffer, then copied in order; avoids `String(value)`.
        var magnitude = value.magnitude
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 20) { digits in
            var count = 0
            while magnitude > 0 {
                digits[count] = UInt8(ascii: "0") + UInt8(magnitude % 10)
                magnitude /= 10
                count += 1
            }
            if value < 0 { output.append(UInt8(ascii: "-")) }
            while count > 0 {
                count -= 1
                output.append(digits[count])
            }
        }
    }

    static func writeDouble(_ value: Double, into output: inout [UInt8]) {
        // JSON has no NaN or infinity; such values are never produced by tokend, but a
        // writer must not emit invalid JSON whatever it is given.
        guard value.isFinite else {
            output.append(contentsOf: "null".utf8)
            return
        }
        output.append(contentsOf: value.description.utf8)
    }

    public static func writeString(_ string: String, into output: inout [UInt8]) {
        output.append(UInt8(ascii: "\""))
        var string = string
        string.withUTF8 { bytes in
            var runStart = 0
            for index in 0..<bytes.count {
                let byte = bytes[index]
                guard byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") else { continue }
                output.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[runStart..<index]))
                runStart = index + 1
                switch byte {
                case UInt8(ascii: "\""): output.append(contentsOf: #"\""#.utf8)
                case UInt8(ascii: "\\"): output.append(contentsOf: #"\\"#.utf8)
                case 0x0A: output.append(contentsOf: #"\n"#.utf8)
                case 0x0D: output.append(contentsOf: #"\r"#.utf8)
                case 0x09: output.append(contentsOf: #"\t"#.utf8)
                default:
                    let hex: [UInt8] = Array("0123456789abcdef".utf8)
                    output.append(contentsOf: #"\u00"#.utf8)
                    output.append(hex[Int(byte >> 4)])
                    output.append(hex[Int(byte & 0xF)])
                }
            }
            output.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[runStart..<bytes.count]))
        }
        output.append(UInt8(ascii: "\""))
    }
}

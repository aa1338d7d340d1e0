import TokendCore
import TokendJSON

/// The `readers` column: a JSON array of reader strings, e.g. `["uid:1000","group:backup"]`.
///
/// Written and read with TokendJSON rather than Foundation's coders: this runs on every grant's
/// write and every row read, where `JSONEncoder`/`JSONDecoder` cost more than the rest of the
/// row's decoding together. The text is the same either way (reader strings hold no character
/// Foundation would escape differently), so existing stores read unchanged.
public enum ReaderListCoding {
    /// The column text for `readers`.
    public static func encode(_ readers: [Reader]) -> String {
        var output: [UInt8] = [UInt8(ascii: "[")]
        for (offset, reader) in readers.enumerated() {
            if offset > 0 { output.append(UInt8(ascii: ",")) }
            JSONWriter.writeString(reader.description, into: &output)
        }
        output.append(UInt8(ascii: "]"))
        return String(decoding: output, as: UTF8.self)
    }

    /// Why a column text is not a reader list.
    public enum Problem: Error, Equatable {
        case notAnArrayOfStrings
        case unknownReader(String)
    }

    /// The readers in a column text.
    public static func decode(_ text: String) throws(Problem) -> [Reader] {
        guard case .array(let elements)? = try? JSONParser.parse(text, maximumDepth: 2) else { throw .notAnArrayOfStrings }
        var readers: [Reader] = []
        readers.reserveCapacity(elements.count)
        for element in elements {
            guard case .string(let string) = element else { throw .notAnArrayOfStrings }
            guard let reader = Reader(string) else { throw .unknownReader(string) }
            readers.append(reader)
        }
        return readers
    }
}

import FuzzSupport
import TokendConfig
import TokendJSON

/// Configuration validation: `ConfigurationParser.parse` over any document tree.
///
/// The TOML syntax itself is TOMLKit's (C++ toml++), which this package leaves out so that the
/// sanitizer build stays small; the input is therefore a JSON text standing for the tree that
/// `TOMLDocument` would produce (objects are tables, `null` stands for a TOML date or time).
/// Checks: validation never crashes, and an error message never contains the secret file's content.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzConfig(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    guard let json = try? JSONParser.parse(buffer: UnsafeBufferPointer(start: data, count: size)) else { return 0 }
    let secret = "fuzz-secret-4f1c2a"
    let parser = ConfigurationParser(file: "/etc/tokend/tokend.toml", baseDirectory: "/etc/tokend") { path in
        guard !path.hasSuffix("missing") else { throw ConfigurationError(file: path, key: "", problem: "no such file") }
        return path.hasSuffix("empty") ? "\n" : secret + "\r\n"
    }
    do {
        _ = try parser.parse(ConfigDocument.value(json))
    } catch {
        fuzzCheck(!error.description.contains(secret), "a configuration error shows the client secret")
    }
    return 0
}

/// JSON stands for the document tree the TOML reader produces.
enum ConfigDocument {
    static func value(_ json: JSONValue) -> ConfigValue {
        switch json {
        case .null: .other("date")
        case .bool(let b): .boolean(b)
        case .int(let i): .integer(Int(i))
        case .double(let d): .float(d)
        case .string(let s): .string(s)
        case .array(let elements): .array(elements.map(value))
        case .object(let object):
            .table(Dictionary(object.members.map { ($0.key, value($0.value)) }, uniquingKeysWith: { first, _ in first }))
        }
    }
}

@main
enum FuzzConfig {
    static func main() { runLibFuzzer(fuzzConfig) }
}

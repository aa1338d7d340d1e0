import Foundation
import Testing
import TokendConfig
import TokendJSON
import TokendTestSupport

/// Replays the committed libFuzzer corpus and minimised crashes of `Fuzz/Sources/fuzz-config`
/// (see `scripts/fuzz`) without sanitizers. An input is a JSON text standing for the document tree
/// the TOML reader produces (`null` stands for a TOML date); validating it never crashes, and an
/// error message never contains the client secret read from a file.
struct FuzzCorpusReplayTests {
    static let target = "fuzz-config"
    static let secret = "fuzz-secret-4f1c2a"

    @Test func configurationValidation() throws {
        try FuzzInputs.replay(Self.target, configurationValidation)
    }

    func configurationValidation(_ file: String, _ bytes: [UInt8]) throws {
        guard let json = try? JSONParser.parse(bytes) else { return }
        let parser = ConfigurationParser(file: "/etc/tokend/tokend.toml", baseDirectory: "/etc/tokend") { path in
            guard !path.hasSuffix("missing") else { throw ConfigurationError(file: path, key: "", problem: "no such file") }
            return path.hasSuffix("empty") ? "\n" : Self.secret + "\r\n"
        }
        do {
            _ = try parser.parse(Self.document(json))
        } catch {
            #expect(!error.description.contains(Self.secret), "a configuration error shows the client secret for \(file)")
        }
    }

    static func document(_ json: JSONValue) -> ConfigValue {
        switch json {
        case .null: .other("date")
        case .bool(let b): .boolean(b)
        case .int(let i): .integer(Int(i))
        case .double(let d): .float(d)
        case .string(let s): .string(s)
        case .array(let elements): .array(elements.map(document))
        case .object(let object):
            .table(Dictionary(object.members.map { ($0.key, document($0.value)) }, uniquingKeysWith: { first, _ in first }))
        }
    }
}

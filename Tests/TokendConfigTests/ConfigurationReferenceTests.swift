import Foundation
import Testing

@testable import TokendConfig

/// `docs/configuration.md` and the parser agree: every documented key is accepted, and every
/// key the parser accepts is documented.
///
/// The documented keys are the rows of `docs/configuration.md` whose first cell is a dotted key
/// in backticks (`daemon.socket`, `providers.<name>.kind`, `token_files.<user>.path`, …).
///
/// The parser has no list of its keys: each table remembers which keys it read and
/// `ConfigTableReader.finish()` rejects the rest as `unknown key`. So a key counts as accepted
/// when a document that is valid except for that key fails with anything but `unknown key` on
/// that key. The probe gives the key an empty inline table, a value no key of these tables
/// takes, so a known key fails on its type and an unknown one reaches `finish()`. Provider keys
/// are probed in an `oauth2`, an `exec` and a `hat` provider, `[store]` keys with both store
/// kinds; a key accepted by any of them is accepted.
///
/// The keys the parser accepts are found by probing, in every table, every snake_case string
/// literal of `Sources/TokendConfig`: the table reader is always called with literal key names
/// (directly, or through the short literal lists in `ConfigurationParser+HAT.swift`). A key
/// whose name were built at run time would escape this scan.
struct ConfigurationReferenceTests {
    /// The tables that hold keys, and how their keys are written in the reference.
    enum Family: String, CaseIterable, CustomStringConvertible {
        case daemon
        case providers
        case tokenFiles = "token_files"
        case metrics
        case store
        case audit
        case loadCredential = "load_credential"
        case loadCredentialIDs = "load_credential.ids"

        var description: String { rawValue }

        /// The top-level table the family's keys are in.
        var topLevelTable: String { rawValue.split(separator: ".").first.map(String.init) ?? rawValue }

        /// The dotted path of the table the probe goes into.
        var tablePath: String {
            switch self {
            case .providers: "providers.p"
            case .tokenFiles: "token_files.alice"
            case .loadCredentialIDs: "load_credential.ids.svc"
            default: rawValue
            }
        }

        /// Documents that are valid as they are, one per variant of the table.
        var baseDocuments: [ConfigValue] {
            switch self {
            case .daemon: [.table(["daemon": .table([:])])]
            case .metrics: [.table(["metrics": .table([:])])]
            case .audit: [.table(["audit": .table([:])])]
            case .loadCredential: [.table(["load_credential": .table([:])])]
            case .loadCredentialIDs: [.table(["load_credential": .table(["ids": .table(["svc": .table([:])])])])]
            case .tokenFiles: [.table(["token_files": .table(["alice": .table(["path": .string("/run/tokend/tokens/alice")])])])]
            case .store:
                [
                    .table(["store": .table(["kind": .string("sqlite")])]),
                    .table(["store": .table(["kind": .string("postgresql"), "url": .string("postgresql://tokend@db.internal/tokend")])]),
                ]
            case .providers:
                [
                    Self.provider([
                        "kind": .string("oauth2"), "token_endpoint": .string("https://idp.example.com/token"),
                        "client_id": .string("tokend"), "client_auth": .string("none"),
                    ]),
                    Self.provider(["kind": .string("exec"), "command": .array([.string("/usr/lib/tokend/refresh")])]),
                    Self.provider([
                        "kind": .string("hat"), "address": .string("pda.example.com"), "application": .string("app"),
                        "redirect": .string("https://app.example.com/hat/success"),
                        "fallback": .string("https://app.example.com/hat/failure"),
                    ]),
                ]
            }
        }

        static func provider(_ members: [String: ConfigValue]) -> ConfigValue {
            .table(["providers": .table(["p": .table(members)])])
        }

        /// `document` with `key = value` added to this family's table.
        func adding(_ key: String, _ value: ConfigValue, to document: ConfigValue) -> ConfigValue {
            let path = tablePath.split(separator: ".").map(String.init)
            return Self.insert(key, value, at: path[...], into: document)
        }

        private static func insert(_ key: String, _ value: ConfigValue, at path: ArraySlice<String>, into document: ConfigValue)
            -> ConfigValue
        {
            guard case .table(var members) = document else { return document }
            guard let first = path.first else {
                members[key] = value
                return .table(members)
            }
            members[first] = insert(key, value, at: path.dropFirst(), into: members[first] ?? .table([:]))
            return .table(members)
        }
    }

    /// One documented key: its table and its name there.
    struct Key: Hashable, CustomStringConvertible {
        var family: Family
        var name: String

        var description: String {
            switch family {
            case .providers: "providers.<name>.\(name)"
            case .tokenFiles: "token_files.<user>.\(name)"
            case .loadCredentialIDs: "load_credential.ids.<id>.\(name)"
            default: "\(family.rawValue).\(name)"
            }
        }

        /// Reads a dotted key as the reference writes it; nil for anything else.
        init?(documented text: String) {
            let parts = text.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
            switch (parts.first.flatMap(Family.init(rawValue:)), parts.count) {
            case (.providers?, 3) where parts[1] == "<name>": self.init(family: .providers, name: parts[2])
            case (.tokenFiles?, 3) where parts[1] == "<user>": self.init(family: .tokenFiles, name: parts[2])
            case (.loadCredential?, 4) where parts[1] == "ids" && parts[2] == "<id>": self.init(family: .loadCredentialIDs, name: parts[3])
            case (let family?, 2) where family != .providers && family != .tokenFiles: self.init(family: family, name: parts[1])
            default: return nil
            }
            guard !name.isEmpty else { return nil }
        }

        init(family: Family, name: String) {
            self.family = family
            self.name = name
        }
    }

    static let repositoryRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    /// Secret files (client secrets, the database password) all read as one secret.
    static var parser: ConfigurationParser {
        ConfigurationParser(file: "/etc/tokend/tokend.toml", baseDirectory: "/etc/tokend") { _ in "a-secret" }
    }

    /// The keys of `docs/configuration.md`, and the first cells that are not keys of a known table.
    static func documentedKeys() throws -> (keys: Set<Key>, unreadable: [String]) {
        let text = try String(contentsOf: repositoryRoot.appendingPathComponent("docs/configuration.md"), encoding: .utf8)
        var keys: Set<Key> = []
        var unreadable: [String] = []
        for line in text.split(separator: "\n") where line.hasPrefix("|") {
            let cells = line.split(separator: "|", omittingEmptySubsequences: false)
            guard cells.count > 2 else { continue }
            let first = cells[1].trimmingCharacters(in: .whitespaces)
            guard first.count > 2, first.hasPrefix("`"), first.hasSuffix("`") else { continue }
            let name = String(first.dropFirst().dropLast())
            if let key = Key(documented: name) { keys.insert(key) } else { unreadable.append(name) }
        }
        return (keys, unreadable)
    }

    /// Every `"snake_case"` string literal in the configuration module's sources.
    static func candidateNames() throws -> Set<String> {
        let directory = repositoryRoot.appendingPathComponent("Sources/TokendConfig")
        let files = try FileManager.default.subpathsOfDirectory(atPath: directory.path).filter { $0.hasSuffix(".swift") }
        var names: Set<String> = []
        for file in files {
            let bytes = Array(try String(contentsOf: directory.appendingPathComponent(file), encoding: .utf8).utf8)
            for (index, byte) in bytes.enumerated() where byte == UInt8(ascii: "\"") {
                var end = index + 1
                while end < bytes.count, isNameByte(bytes[end]) { end += 1 }
                guard end > index + 1, end < bytes.count, bytes[end] == UInt8(ascii: "\""),
                    bytes[index + 1] >= UInt8(ascii: "a"), bytes[index + 1] <= UInt8(ascii: "z")
                else { continue }
                names.insert(String(decoding: bytes[(index + 1)..<end], as: UTF8.self))
            }
        }
        return names
    }

    static func isNameByte(_ byte: UInt8) -> Bool {
        (byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "z")) || (byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9"))
            || byte == UInt8(ascii: "_")
    }

    /// Whether the parser accepts `name` in `family`'s table (see the type's comment).
    static func accepts(_ family: Family, _ name: String) -> Bool {
        let probed = "\(family.tablePath).\(name)"
        for document in family.baseDocuments {
            do throws(ConfigurationError) {
                _ = try parser.parse(family.adding(name, .table([:]), to: document))
                return true
            } catch {
                if error.key == probed, error.problem == "unknown key" { continue }
                return true
            }
        }
        return false
    }

    /// Whether the parser accepts `name` as a top-level table.
    static func acceptsTable(_ name: String) -> Bool {
        do throws(ConfigurationError) {
            _ = try parser.parse(.table([name: .integer(1)]))
            return true
        } catch {
            return !(error.key == name && error.problem == "unknown key")
        }
    }

    @Test(arguments: Family.allCases)
    func baseDocumentsAreValid(family: Family) {
        for document in family.baseDocuments {
            do throws(ConfigurationError) {
                _ = try Self.parser.parse(document)
            } catch {
                Issue.record("the \(family) probe needs a valid document to add keys to: \(error)")
            }
        }
    }

    @Test func everyDocumentedKeyIsAccepted() throws {
        let (keys, unreadable) = try Self.documentedKeys()
        #expect(unreadable.isEmpty, "first cells that name no key of a known table: \(unreadable)")
        #expect(keys.count > 50, "docs/configuration.md lists only \(keys.count) keys")
        for key in keys.sorted(by: { $0.description < $1.description }) {
            #expect(Self.accepts(key.family, key.name), "docs/configuration.md documents \(key), which the parser does not accept")
        }
    }

    @Test func everyAcceptedKeyIsDocumented() throws {
        let documented = try Self.documentedKeys().keys
        let candidates = try Self.candidateNames()
        #expect(candidates.count > 50, "found only \(candidates.count) string literals in Sources/TokendConfig")
        var accepted: Set<Key> = []
        for family in Family.allCases {
            for name in candidates where Self.accepts(family, name) {
                accepted.insert(Key(family: family, name: name))
            }
        }
        for key in accepted.subtracting(documented).sorted(by: { $0.description < $1.description }) {
            Issue.record("the parser accepts \(key), which docs/configuration.md does not document")
        }
        // The scan found the keys at all (the other direction checks each documented key).
        #expect(accepted == documented, "accepted and documented keys differ")
    }

    @Test func everyTopLevelTableIsDocumented() throws {
        let documentedTables = Set(try Self.documentedKeys().keys.map(\.family.topLevelTable))
        let acceptedTables = Set(try Self.candidateNames().filter(Self.acceptsTable))
        #expect(acceptedTables == documentedTables)
        #expect(documentedTables == Set(Family.allCases.map(\.topLevelTable)))
    }
}

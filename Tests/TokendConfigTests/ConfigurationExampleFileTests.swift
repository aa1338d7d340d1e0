import Foundation
import Testing

@testable import TokendConfig

/// `config/tokend.toml.example` (the Debian package's conffile, `tokend.toml.example` of
/// `scripts/install`) agrees with the parser, `docs/configuration.md` and the package.
///
/// The example has active lines and commented-out settings (`# key = value`, `# [table]`);
/// other comment lines are prose. Checked:
/// - the file as installed parses, and its administrators are a group the package creates;
/// - with every commented-out setting turned on, it still parses, and every key in it is a key
///   of `docs/configuration.md`;
/// - every documented key of `[daemon]`, `[metrics]`, `[store]` and `[load_credential]` appears in it;
/// - a commented-out setting whose comment says neither "e.g." nor "required" shows the built-in
///   default: taking it out of the file changes nothing the parser makes of it.
struct ConfigurationExampleFileTests {
    /// One commented-out key line: the table it is in, its key, and its comment.
    struct Setting: CustomStringConvertible {
        var table: [String]
        var key: String
        var line: String

        var isDefault: Bool { !line.contains("e.g.") && !line.contains("required") }
        var description: String { (table + [key]).joined(separator: ".") }
    }

    /// The example, read as the installed file and as the file with every setting turned on.
    struct Example {
        var active: String
        var full: String
        var settings: [Setting]

        init(text: String) {
            var active: [String] = []
            var full: [String] = []
            var settings: [Setting] = []
            var table: [String] = []
            for line in text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init) {
                let trimmed = line.trimmingCharacters(in: .whitespaces)
                let uncommented = trimmed.hasPrefix("# ") ? String(trimmed.dropFirst(2)) : nil
                if !trimmed.isEmpty, !trimmed.hasPrefix("#") {
                    active.append(line)
                    full.append(line)
                    if let header = Self.header(trimmed) { table = header }
                } else if let uncommented, let header = Self.header(uncommented) {
                    full.append(uncommented)
                    table = header
                } else if let uncommented, let key = Self.key(uncommented) {
                    full.append(uncommented)
                    settings.append(Setting(table: table, key: key, line: uncommented))
                }
            }
            self.active = active.joined(separator: "\n")
            self.full = full.joined(separator: "\n")
            self.settings = settings
        }

        /// `[a.b]` (and a trailing comment) as its path; nil for anything else.
        static func header(_ line: String) -> [String]? {
            guard line.hasPrefix("["), let end = line.firstIndex(of: "]") else { return nil }
            let path = line[line.index(after: line.startIndex)..<end]
            guard !path.isEmpty, path.allSatisfy({ $0.isLetter || $0.isNumber || "_.-".contains($0) }) else { return nil }
            return path.split(separator: ".").map(String.init)
        }

        /// The key of `key = value`; nil for anything else (prose).
        static func key(_ line: String) -> String? {
            guard let equals = line.range(of: " = ") else { return nil }
            let key = line[..<equals.lowerBound]
            guard let first = key.first, first.isLowercase, key.allSatisfy({ $0.isLowercase || $0.isNumber || $0 == "_" }) else {
                return nil
            }
            return String(key)
        }
    }

    static let repositoryRoot = ConfigurationReferenceTests.repositoryRoot

    static func example() throws -> Example {
        Example(text: try String(contentsOf: repositoryRoot.appendingPathComponent("config/tokend.toml.example"), encoding: .utf8))
    }

    static func parse(_ text: String) throws -> DaemonConfiguration {
        try ConfigurationReferenceTests.parser.parse(try TOMLDocument.parse(text, file: "/etc/tokend/tokend.toml"))
    }

    /// Every key of a parsed document, as `docs/configuration.md` writes it.
    static func keys(of document: ConfigValue) -> [ConfigurationReferenceTests.Key] {
        guard case .table(let tables) = document else { return [] }
        var keys: [ConfigurationReferenceTests.Key] = []
        for (name, value) in tables {
            guard let family = ConfigurationReferenceTests.Family(rawValue: name), case .table(let members) = value else {
                Issue.record("the example has a top-level '\(name)' that is no table of the reference")
                continue
            }
            switch family {
            case .providers, .tokenFiles:
                for case .table(let entry) in members.values {
                    keys += entry.keys.map { ConfigurationReferenceTests.Key(family: family, name: $0) }
                }
            case .daemon, .metrics, .store, .audit:
                keys += members.keys.map { ConfigurationReferenceTests.Key(family: family, name: $0) }
            case .loadCredential:
                keys += members.keys.map { ConfigurationReferenceTests.Key(family: family, name: $0) }
                if case .table(let ids)? = members["ids"] {
                    for case .table(let entry) in ids.values {
                        keys += entry.keys.map { ConfigurationReferenceTests.Key(family: .loadCredentialIDs, name: $0) }
                    }
                }
            case .loadCredentialIDs:
                Issue.record("'load_credential.ids' is no top-level table")
            }
        }
        return keys
    }

    /// `document` without the key at `path`.
    static func removing(_ path: ArraySlice<String>, from document: ConfigValue) -> ConfigValue {
        guard case .table(var members) = document, let first = path.first else { return document }
        if path.count == 1 {
            members[first] = nil
        } else if let inner = members[first] {
            members[first] = removing(path.dropFirst(), from: inner)
        }
        return .table(members)
    }

    @Test func theInstalledFileParsesAndItsAdministratorsAreTheGroupThePackageCreates() throws {
        let configuration = try Self.parse(try Self.example().active)
        #expect(configuration.adminGroups == ["tokend-admin"])
        let sysusers = try String(
            contentsOf: Self.repositoryRoot.appendingPathComponent("systemd/sysusers.d/tokend.conf"), encoding: .utf8)
        let groups = Set(
            sysusers.split(separator: "\n").compactMap { line -> String? in
                let fields = line.split(separator: " ")
                return fields.count >= 2 && fields[0] == "g" ? String(fields[1]) : nil
            })
        for group in configuration.adminGroups {
            #expect(groups.contains(group), "admin group \(group) is not created by systemd/sysusers.d/tokend.conf")
        }
    }

    @Test func everySettingParsesAndIsDocumented() throws {
        let example = try Self.example()
        #expect(example.settings.count > 30, "found only \(example.settings.count) commented-out settings")
        _ = try Self.parse(example.full)
        let documented = try ConfigurationReferenceTests.documentedKeys().keys
        for key in Self.keys(of: try TOMLDocument.parse(example.full, file: "example")) where !documented.contains(key) {
            Issue.record("config/tokend.toml.example sets \(key), which docs/configuration.md does not document")
        }
    }

    @Test(arguments: [ConfigurationReferenceTests.Family.daemon, .metrics, .store, .loadCredential, .loadCredentialIDs])
    func everyDocumentedKeyIsInTheExample(family: ConfigurationReferenceTests.Family) throws {
        let shown = Set(Self.keys(of: try TOMLDocument.parse(try Self.example().full, file: "example")))
        let documented = try ConfigurationReferenceTests.documentedKeys().keys.filter { $0.family == family }
        #expect(!documented.isEmpty)
        for key in documented.subtracting(shown).sorted(by: { $0.name < $1.name }) {
            Issue.record("config/tokend.toml.example does not show \(key) (docs/configuration.md documents it)")
        }
    }

    @Test func settingsShownAsDefaultsAreTheDefaults() throws {
        let example = try Self.example()
        let document = try TOMLDocument.parse(example.full, file: "/etc/tokend/tokend.toml")
        let parser = ConfigurationReferenceTests.parser
        let full = try parser.parse(document)
        let defaults = example.settings.filter(\.isDefault)
        #expect(defaults.count > 20, "found only \(defaults.count) settings shown as defaults")
        for setting in defaults {
            let without = try parser.parse(Self.removing((setting.table + [setting.key])[...], from: document))
            #expect(without == full, "config/tokend.toml.example shows \(setting.description) as a default, but it is not: \(setting.line)")
        }
    }
}

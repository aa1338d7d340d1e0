import Glibc
import Testing
import TokenctlSupport
import TokendJSON
import TokendTestSupport

/// The fast parser and the full parser read the same options: for every one-shot subcommand,
/// the long options tokenctl's ArgumentParser declaration has (from the built binary's
/// `--experimental-dump-help`) are exactly its ``OneShotSyntax`` table's, with the same
/// defaults, and the fast parser reads those it lists and gives way on the others.
struct OneShotSyntaxTests {
    /// The built tokenctl: `$TOKEND_BIN_DIR/tokenctl`, else `.build/debug/tokenctl` of this checkout.
    static let tokenctl: String = {
        if let directory = getenv("TOKEND_BIN_DIR") { return String(cString: directory) + "/tokenctl" }
        // Without this file's name, TokenctlSupportTests and Tests: the checkout.
        let root = String(#filePath).split(separator: "/", omittingEmptySubsequences: false).dropLast(3)
        return root.joined(separator: "/") + "/.build/debug/tokenctl"
    }()

    /// Flags ArgumentParser adds to every command by itself; the fast parser leaves them to it.
    static let builtIn: Set<String> = ["help", "version"]

    static func syntax(_ subcommand: String) throws -> OneShotSyntax {
        try #require(OneShotSyntax.all.first { $0.subcommand == subcommand })
    }

    /// The long options (name → default, if any) the full parser declares for `subcommand`,
    /// without ArgumentParser's own flags.
    static func declared(_ subcommand: String) async throws -> [String: String?] {
        let output = try await ChildProcess.run(tokenctl, [subcommand, "--experimental-dump-help"], timeout: .seconds(60))
        try #require(output.status == 0, "tokenctl \(subcommand) --experimental-dump-help: \(output.stderr)")
        let tool = try JSONParser.parse(output.stdout)
        let command = try #require(tool.objectValue?["command"]?.objectValue)
        #expect(command["commandName"]?.stringValue == subcommand)
        var options: [String: String?] = [:]
        for argument in command["arguments"]?.arrayValue ?? [] {
            let names = argument.objectValue?["names"]?.arrayValue ?? []
            for name in names where name.objectValue?["kind"]?.stringValue == "long" {
                guard let long = name.objectValue?["name"]?.stringValue, !builtIn.contains(long) else { continue }
                options[long] = argument.objectValue?["defaultValue"]?.stringValue
            }
        }
        return options
    }

    @Test(arguments: OneShotSyntax.all.map(\.subcommand))
    func theTableNamesExactlyTheFullParsersOptions(subcommand: String) async throws {
        let syntax = try Self.syntax(subcommand)
        let declared = try await Self.declared(subcommand)
        let fast = Dictionary(syntax.fastOptions.map { ($0.name, $0.defaultValue) }, uniquingKeysWith: { first, _ in first })
        #expect(fast.count == syntax.fastOptions.count, "the table lists an option twice")
        let fullParserOnly = Set(syntax.fullParserOnly)
        #expect(fullParserOnly.isDisjoint(with: fast.keys), "an option both read and left to the full parser")
        #expect(
            Set(declared.keys) == Set(fast.keys).union(fullParserOnly),
            "the full parser declares \(declared.keys.sorted()); the table has \(fast.keys.sorted()) + \(fullParserOnly.sorted())")
        for (name, defaultValue) in fast {
            #expect(declared[name] == defaultValue, "--\(name): the full parser's default differs from the table's")
        }
    }

    @Test(arguments: OneShotSyntax.all.map(\.subcommand))
    func theFastParserReadsTheTablesOptionsAndGivesWayOnTheOthers(subcommand: String) async throws {
        let syntax = try Self.syntax(subcommand)
        let declared = try await Self.declared(subcommand)
        let plain = [subcommand] + (syntax.takesUser ? ["alice"] : []) + Array(repeating: "get", count: syntax.operands)
        #expect(OneShotCommandLine.parse(plain) != nil, "\(plain)")
        let fast = Set(syntax.fastOptions.map(\.name))
        for (name, defaultValue) in declared {
            let line = plain + ["--\(name)", defaultValue.flatMap { $0 } ?? "x"]
            if fast.contains(name) {
                #expect(OneShotCommandLine.parse(line) != nil, "the fast parser refuses \(line)")
            } else {
                #expect(OneShotCommandLine.parse(line) == nil, "the fast parser reads \(line), which only the full parser knows")
            }
        }
        #expect(OneShotCommandLine.parse(plain + ["--no-such-option", "1"]) == nil)
    }
}

import Glibc
import Testing
import TokenctlSupport
import TokendClient
import TokendJSON
import TokendProtocol

/// `docs/troubleshooting.md` lists every exit status of `tokenctl` and every Varlink error tokend
/// can answer, and says for each error the exit status `tokenctl` really gives it.
///
/// The page's tables are read by their first cell: in the section "Exit statuses of tokenctl" a
/// status in backticks (`` `5` ``), in "Errors tokend answers" a full error name in backticks and
/// the status in the second cell. The errors expected are those of `TokendErrorName`, every
/// `error` declared in `interfaces/*.varlink`, and every `org.varlink.service` error
/// `VarlinkError` can build (found in its source), so a new error anywhere fails here until the
/// page explains it.
///
/// Files are read with libc: Foundation in this test target would put its operator overloads
/// into every file's expressions (and the compiler's time limit on them).
struct TroubleshootingPageTests {
    struct ReadError: Error, CustomStringConvertible {
        var description: String
    }

    /// The repository: three folders up from this file.
    static let repositoryRoot: String = {
        var path = #filePath
        for _ in 0..<3 { path = String(path[..<(path.lastIndex(of: "/") ?? path.startIndex)]) }
        return path
    }()

    /// The file at `path` (relative to the repository), as UTF-8 text.
    static func text(_ path: String) throws -> String {
        guard let file = fopen(repositoryRoot + "/" + path, "r") else { throw ReadError(description: "cannot open \(path)") }
        defer { fclose(file) }
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let count = fread(&buffer, 1, buffer.count, file)
            if count == 0 { break }
            bytes += buffer[..<count]
        }
        guard ferror(file) == 0 else { throw ReadError(description: "cannot read \(path)") }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// The names of the entries of the folder `path` (relative to the repository).
    static func entries(_ path: String) throws -> [String] {
        guard let directory = opendir(repositoryRoot + "/" + path) else { throw ReadError(description: "cannot list \(path)") }
        defer { closedir(directory) }
        var names: [String] = []
        while let entry = readdir(directory) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
            }
            if name != ".", name != ".." { names.append(name) }
        }
        return names
    }

    /// The table rows of the `## heading` section of the page: each row's cells, trimmed, without
    /// the header and separator rows.
    static func rows(inSection heading: String) throws -> [[String]] {
        let page = try text("docs/troubleshooting.md")
        var inSection = false
        var rows: [[String]] = []
        for line in page.split(separator: "\n", omittingEmptySubsequences: false) {
            if line.hasPrefix("## ") {
                inSection = Self.trimmed(line.dropFirst(3)) == heading
                continue
            }
            guard inSection, line.hasPrefix("|") else { continue }
            let cells = line.split(separator: "|", omittingEmptySubsequences: false).dropFirst().dropLast()
                .map(Self.trimmed)
            guard let first = cells.first, first.count > 2, first.hasPrefix("`"), first.hasSuffix("`") else { continue }
            rows.append(cells)
        }
        return rows
    }

    /// `text` without the spaces around it.
    static func trimmed(_ text: Substring) -> String {
        String(text.drop { $0 == " " }.reversed().drop { $0 == " " }.reversed())
    }

    /// `` `text` `` without its backticks; nil for anything else.
    static func code(_ cell: String) -> String? {
        guard cell.count > 2, cell.hasPrefix("`"), cell.hasSuffix("`") else { return nil }
        return String(cell.dropFirst().dropLast())
    }

    /// The documented exit statuses, each with its row's other cells.
    static func documentedStatuses() throws -> [Int32: [String]] {
        var statuses: [Int32: [String]] = [:]
        for row in try rows(inSection: "Exit statuses of tokenctl") {
            guard let status = code(row[0]).flatMap({ Int32($0) }) else {
                Issue.record("an exit-status row whose first cell is no status: \(row[0])")
                continue
            }
            #expect(statuses[status] == nil, "exit status \(status) is documented twice")
            statuses[status] = Array(row.dropFirst())
        }
        return statuses
    }

    /// The documented errors and the exit status each row gives them.
    static func documentedErrors() throws -> [String: Int32?] {
        var errors: [String: Int32?] = [:]
        for row in try rows(inSection: "Errors tokend answers") {
            guard let name = code(row[0]) else { continue }
            #expect(errors[name] == nil, "error \(name) is documented twice")
            errors[name] = row.count > 1 ? code(row[1]).flatMap { Int32($0) } : nil
        }
        return errors
    }

    /// `error Name (…)` of every interface file, as fully qualified names.
    static func interfaceErrors() throws -> Set<String> {
        let files = try entries("interfaces").filter { $0.hasSuffix(".varlink") }
        #expect(!files.isEmpty, "no interfaces/*.varlink")
        var names: Set<String> = []
        for file in files {
            let lines = try text("interfaces/\(file)").split(separator: "\n").map(Self.trimmed)
            let interface = try #require(
                lines.first { $0.hasPrefix("interface ") }.map { String($0.dropFirst("interface ".count)) },
                "\(file) declares no interface")
            for line in lines where line.hasPrefix("error ") {
                let name = line.dropFirst("error ".count).prefix { $0.isLetter || $0.isNumber }
                names.insert("\(interface).\(name)")
            }
        }
        return names
    }

    /// The `org.varlink.service` errors `VarlinkError` builds: each `name: "org.varlink.service.X"`
    /// in its source.
    static func serviceErrors() throws -> Set<String> {
        let source = try text("Sources/TokendProtocol/VarlinkError.swift")
        let marker = "name: \"org.varlink.service."
        var names: Set<String> = []
        var rest = source[...]
        while let found = rest.firstRange(of: marker) {
            let name = rest[found.upperBound...].prefix { $0.isLetter || $0.isNumber }
            names.insert("org.varlink.service.\(name)")
            rest = rest[found.upperBound...]
        }
        return names
    }

    @Test func everyExitStatusIsExplained() throws {
        let documented = try Self.documentedStatuses()
        let statuses = Set(TokenctlExitStatus.table.map(\.status))
        #expect(statuses.count == TokenctlExitStatus.table.count, "TokenctlExitStatus.table lists a status twice")
        for status in statuses.subtracting(documented.keys).sorted() {
            Issue.record("docs/troubleshooting.md does not explain exit status \(status)")
        }
        for status in Set(documented.keys).subtracting(statuses).sorted() {
            Issue.record("docs/troubleshooting.md explains exit status \(status), which tokenctl does not have")
        }
        for (status, cells) in documented where status != TokenctlExitStatus.success {
            #expect(cells.count >= 2 && cells.allSatisfy { !$0.isEmpty }, "exit status \(status) needs a meaning and what to do")
        }
    }

    @Test func everyErrorIsExplainedWithItsExitStatus() throws {
        let documented = try Self.documentedErrors()
        let interface = try Self.interfaceErrors()
        let service = try Self.serviceErrors()
        #expect(interface.count >= TokendErrorName.allCases.count, "found only \(interface.count) errors in interfaces/")
        #expect(service.contains("org.varlink.service.InvalidParameter"), "found no org.varlink.service errors: \(service)")
        let expected = Set(TokendErrorName.allCases.map(\.rawValue)).union(interface).union(service)
        for name in expected.subtracting(documented.keys).sorted() {
            Issue.record("docs/troubleshooting.md does not explain the error \(name)")
        }
        for name in Set(documented.keys).subtracting(expected).sorted() {
            Issue.record("docs/troubleshooting.md explains \(name), which tokend does not answer")
        }
        for (name, status) in documented.sorted(by: { $0.key < $1.key }) {
            let actual = TokenctlExitStatus.status(for: TokendClientError(code: .init(varlinkErrorName: name)))
            #expect(
                status == actual,
                "docs/troubleshooting.md gives \(name) exit status \(status.map(String.init) ?? "none"); tokenctl exits \(actual)")
        }
    }

    /// The page is found and read as intended: a page whose headings changed must not pass by
    /// having no rows at all.
    @Test func theTablesAreWhereTheTestLooks() throws {
        #expect(try Self.documentedStatuses().count >= 10)
        #expect(try Self.documentedErrors().count >= 15)
    }
}

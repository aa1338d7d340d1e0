import Foundation
import Testing
import TokendProtocol

/// The reader grammar against `Tests/Fixtures/reader-grammar.json`, the table the Python and Go
/// clients' tests read too: a case on which the languages disagree fails in one of them.
struct ReaderGrammarTests {
    struct Case: Sendable, CustomTestStringConvertible {
        var text: String
        /// The canonical reader, or `nil` when the text is refused.
        var reader: String?
        /// The refusal's code (``ReaderParseError/Problem``'s raw value).
        var error: String?
        var testDescription: String { text.debugDescription }
    }

    static let fixture: String = {
        var url = URL(fileURLWithPath: #filePath)
        url.deleteLastPathComponent()  // TokendProtocolTests
        url.deleteLastPathComponent()  // Tests
        return url.appendingPathComponent("Fixtures/reader-grammar.json").path
    }()

    static let cases: [Case] = {
        guard let data = FileManager.default.contents(atPath: fixture),
            let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any],
            let entries = object["cases"] as? [[String: String]]
        else { return [] }
        return entries.map { Case(text: $0["text"] ?? "", reader: $0["reader"], error: $0["error"]) }
    }()

    @Test func theFixtureHasCasesOfEveryKindAndEveryProblem() {
        #expect(Self.cases.count >= 40)
        let kinds = Set(Self.cases.compactMap { $0.reader.flatMap { Reader($0)?.kind } })
        #expect(kinds == Set(Reader.Kind.allCases))
        let problems = Set(Self.cases.compactMap(\.error))
        #expect(problems == Set(ReaderParseError.Problem.allCases.map(\.rawValue)))
        #expect(Self.cases.allSatisfy { ($0.reader == nil) != ($0.error == nil) })
    }

    @Test(arguments: cases)
    func parsesAsTheFixtureSays(_ entry: Case) {
        do {
            let reader = try Reader(parsing: entry.text)
            #expect(reader.description == entry.reader, "accepted, expected \(entry.error ?? "")")
            // The canonical text parses to the same reader: what the stores write reads back.
            #expect(Reader(reader.description) == reader)
        } catch {
            #expect(error.problem.rawValue == entry.error, "refused: \(error.description)")
            #expect(Reader(entry.text) == nil)
        }
    }

    @Test(arguments: cases.filter { $0.error != nil })
    func aRefusalIsOneLineNamingTheReader(_ entry: Case) throws {
        let error = try #require(throws: ReaderParseError.self) { try Reader(parsing: entry.text) }
        #expect(!error.description.contains("\n"))
        #expect(error.description.hasPrefix("reader '"))
        #expect(error.description.unicodeScalars.count < 400)
    }
}

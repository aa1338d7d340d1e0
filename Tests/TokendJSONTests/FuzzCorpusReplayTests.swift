import Foundation
import Testing
import TokendJSON

/// Replays the committed libFuzzer corpus and minimised crashes of `Fuzz/Sources/fuzz-json`
/// (see `scripts/fuzz`) without sanitizers, with the same invariants: parsing never crashes, and
/// whatever parses is written back as JSON that parses to an equal value, stably.
struct FuzzCorpusReplayTests {
    static let target = "fuzz-json"

    @Test func corpusIsPresent() {
        #expect(!FuzzInputs.files(Self.target).isEmpty, "Fuzz/Corpus/\(Self.target) is missing or empty")
    }

    @Test func jsonRoundTrip() throws {
        for file in FuzzInputs.files(Self.target) {
            try jsonRoundTrip(file, try FuzzInputs.contents(file))
        }
    }

    func jsonRoundTrip(_ file: String, _ bytes: [UInt8]) throws {
        guard let value = try? JSONParser.parse(bytes) else { return }
        var written: [UInt8] = []
        JSONWriter.write(value, into: &written)
        guard let reparsed = try? JSONParser.parse(written) else {
            Issue.record("JSONWriter output does not parse for \(file)")
            return
        }
        #expect(reparsed == value, "round trip changed the value of \(file)")
        var rewritten: [UInt8] = []
        JSONWriter.write(reparsed, into: &rewritten)
        #expect(rewritten == written, "JSONWriter output is not stable for \(file)")
    }
}

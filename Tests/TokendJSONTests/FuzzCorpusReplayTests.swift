import Foundation
import Testing
import TokendJSON
import TokendTestSupport

/// Replays the committed libFuzzer corpus and minimised crashes of `Fuzz/Sources/fuzz-json`
/// (see `scripts/fuzz`) without sanitizers, with the same invariants: parsing never crashes, and
/// whatever parses is written back as JSON that parses to an equal value, stably.
struct FuzzCorpusReplayTests {
    static let target = "fuzz-json"

    @Test func jsonRoundTrip() throws {
        try FuzzInputs.replay(Self.target, jsonRoundTrip)
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

import Testing
import TokenctlSupport
import TokendJSON
import TokendProtocol

@testable import TokendClient

/// What `tokenctl store adopt --dry-run` shows an administrator, who vouches for every row it
/// lists by what it shows. The rows' columns come from the database, unauthenticated: someone
/// who can write it chooses every character.
@Suite struct StoreAdoptionTextTests {
    /// A reader list as the daemon reports it for an untagged row.
    static func adoption(readers: [String], user: String = "laundered") throws -> StoreAdoption {
        let row: JSONObject = [
            "userIdentifier": .string(user), "provider": .string("corp"), "readers": .array(readers.map { .string($0) }),
            "enrolledUid": .int(0), "generation": .int(41),
        ]
        let parameters: JSONObject = [
            "storeId": .string("5c0e"), "schemaVersionBefore": .int(3), "schemaVersion": .int(6), "tagged": .array([.object(row)]),
            "taggedCount": .int(1), "carriedOver": .int(0), "rolledBack": .array([]), "rolledBackCount": .int(0),
            "refused": .array([]), "refusedCount": .int(0), "credentials": .int(1), "dryRun": .bool(true),
        ]
        return try TokendClient.storeAdoption(parameters)
    }

    /// A reader text with a carriage return and terminal escapes, printed as it is, erases the
    /// line that shows `uid:65534` and draws a harmless one in its place. The grammar refuses
    /// control characters in an `exe:` path, but the rows come from the database as whoever wrote
    /// it chose, so what is shown must not depend on that.
    @Test func aReaderCannotRedrawTheLineThatShowsTheOthers() throws {
        let hiding = "exe:/\r\u{1B}[2K  laundered  provider corp  readers uid:0"
        #expect(Reader(hiding) == nil)
        let text = StoreAdoptionText.render(try Self.adoption(readers: ["uid:0", "uid:65534", hiding]))
        let controls = text.unicodeScalars.filter { $0 != "\n" && ($0.value < 0x20 || (0x7F..<0xA0).contains($0.value)) }
        #expect(controls.isEmpty, "control characters reach the terminal: \(controls.map(\.value))")
        let line = try #require(text.split(separator: "\n").first { $0.contains("uid:65534") })
        #expect(line.hasPrefix("  laundered"), "\(line)")
    }

    /// Right-to-left overrides and the like reorder what a terminal shows; they are made visible
    /// too, in a user identifier as in a reader.
    @Test func formattingCharactersAreShownAsEscapes() throws {
        let text = StoreAdoptionText.render(
            try Self.adoption(readers: ["uid:0", "exe:/usr/bin/\u{202E}00056:diu"], user: "laundered\u{2066}"))
        #expect(!text.unicodeScalars.contains { (0x202A...0x202E).contains($0.value) || (0x2066...0x2069).contains($0.value) }, "\(text)")
        #expect(text.contains(#"\u{202E}"#) && text.contains(#"\u{2066}"#), "\(text)")
    }
}

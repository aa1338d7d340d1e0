import Foundation

// Part of TokendTestSupport: the corpus lives at the repository's top, three levels above this
// file.

/// The files of `Fuzz/Corpus/<target>/` and `Fuzz/Crashes/<target>/`, relative to the repository root.
public enum FuzzInputs {
    public static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    public static func files(_ target: String) -> [String] {
        ["Fuzz/Corpus/\(target)", "Fuzz/Crashes/\(target)"].flatMap { directory in
            let names = (try? FileManager.default.contentsOfDirectory(atPath: root.appendingPathComponent(directory).path)) ?? []
            return names.filter { !$0.hasPrefix(".") }.sorted().map { "\(directory)/\($0)" }
        }
    }

    public static func contents(_ file: String) throws -> [UInt8] {
        [UInt8](try Data(contentsOf: root.appendingPathComponent(file)))
    }

    public struct Missing: Error, CustomStringConvertible {
        public let description: String
    }

    /// Runs `body` on every committed input of `target` (corpus and minimised crashes), in
    /// order. Throws when there is none: a corpus that went missing must fail, not pass empty.
    public static func replay(_ target: String, _ body: (_ file: String, _ bytes: [UInt8]) throws -> Void) throws {
        let inputs = files(target)
        guard !inputs.isEmpty else { throw Missing(description: "Fuzz/Corpus/\(target) is missing or empty") }
        for file in inputs { try body(file, try contents(file)) }
    }
}

import Foundation

// One file, linked into every test target that replays a fuzz corpus (the others are symlinks
// to it): the corpus lives at the repository's top, three levels above this file.

/// The files of `Fuzz/Corpus/<target>/` and `Fuzz/Crashes/<target>/`, relative to the repository root.
enum FuzzInputs {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    static func files(_ target: String) -> [String] {
        ["Fuzz/Corpus/\(target)", "Fuzz/Crashes/\(target)"].flatMap { directory in
            let names = (try? FileManager.default.contentsOfDirectory(atPath: root.appendingPathComponent(directory).path)) ?? []
            return names.filter { !$0.hasPrefix(".") }.sorted().map { "\(directory)/\($0)" }
        }
    }

    static func contents(_ file: String) throws -> [UInt8] {
        [UInt8](try Data(contentsOf: root.appendingPathComponent(file)))
    }
}

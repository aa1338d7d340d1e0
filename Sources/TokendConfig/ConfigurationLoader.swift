#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// Reads a configuration file from disk: the I/O around `ConfigurationParser`.
public enum ConfigurationLoader {
    /// Loads and validates `path`.
    /// - Throws: `ConfigurationError` naming the file, the key and the problem.
    public static func load(path: String) throws(ConfigurationError) -> DaemonConfiguration {
        let absolute = path.hasPrefix("/") ? path : FileManager.default.currentDirectoryPath + "/" + path
        let normalized = ConfigurationParser.normalize(absolute)
        let text: String
        do {
            text = try readFile(normalized)
        } catch {
            throw ConfigurationError(file: normalized, key: "", problem: "cannot read the file: \(error)")
        }
        let document = try TOMLDocument.parse(text, file: normalized)
        let directory = String(normalized[..<(normalized.lastIndex(of: "/") ?? normalized.startIndex)])
        var parser = ConfigurationParser(file: normalized, baseDirectory: directory.isEmpty ? "/" : directory, readSecretFile: readFile)
        parser.credentialsDirectory = ProcessInfo.processInfo.environment["CREDENTIALS_DIRECTORY"]
        return try parser.parse(document)
    }

    /// Reads a small text file (configuration or secret), failing with a readable error.
    static func readFile(_ path: String) throws -> String {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw FileReadError(path: path)
        }
        guard let text = String(data: data, encoding: .utf8) else { throw FileReadError(path: path, problem: "is not UTF-8 text") }
        return text
    }
}

struct FileReadError: Error, CustomStringConvertible {
    var path: String
    var problem = "does not exist or is not readable"
    var description: String { problem }
}

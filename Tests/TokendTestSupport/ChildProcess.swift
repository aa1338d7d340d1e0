import Foundation

#if canImport(Glibc)
    import Glibc
#endif

// Part of TokendTestSupport, the helpers every test target shares.

/// Runs a program to completion for a test, its output collected in temporary files.
///
/// Files, not pipes: tests run in parallel, and a long-lived server that one test starts
/// (PostgreSQL, an IdP) can inherit the write end of a pipe another test has just created for
/// its command. A reader waiting for end-of-file on that pipe then waits as long as the server
/// lives — and a blocking read on Swift's cooperative pool (two threads here) soon starves the
/// whole test process. A file has no such end: it is read once the program has exited.
public enum ChildProcess {
    public struct Failure: Error, CustomStringConvertible {
        public let description: String
        public init(description: String) { self.description = description }
    }

    public struct Output {
        public var status: Int32
        public var stdout: String
        public var stderr: String
    }

    public static func run(
        _ executable: String, _ arguments: [String], stdin: String? = nil, environment: [String: String] = [:],
        directory: String? = nil, timeout: Duration
    ) async throws -> Output {
        let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("tokend-child-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: scratch) }
        let outURL = scratch.appendingPathComponent("stdout")
        let errURL = scratch.appendingPathComponent("stderr")
        let inURL = scratch.appendingPathComponent("stdin")
        FileManager.default.createFile(atPath: outURL.path, contents: nil)
        FileManager.default.createFile(atPath: errURL.path, contents: nil)
        FileManager.default.createFile(atPath: inURL.path, contents: Data((stdin ?? "").utf8))

        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        if let directory { process.currentDirectoryURL = URL(fileURLWithPath: directory) }
        if !environment.isEmpty {
            var merged = ProcessInfo.processInfo.environment
            for (key, value) in environment { merged[key] = value }
            process.environment = merged
        }
        let out = try FileHandle(forWritingTo: outURL)
        let err = try FileHandle(forWritingTo: errURL)
        let input = try FileHandle(forReadingFrom: inURL)
        defer {
            try? out.close()
            try? err.close()
            try? input.close()
        }
        process.standardOutput = out
        process.standardError = err
        process.standardInput = stdin == nil ? FileHandle.nullDevice : input
        try process.run()
        let deadline = ContinuousClock.now + timeout
        while process.isRunning {
            if ContinuousClock.now > deadline {
                kill(process.processIdentifier, SIGKILL)
                throw Failure(description: "\(executable) \(arguments.joined(separator: " ")) did not finish within \(timeout)")
            }
            try await Task.sleep(for: .milliseconds(10))
        }
        return Output(
            status: process.terminationStatus,
            stdout: (try? String(contentsOf: outURL, encoding: .utf8)) ?? "",
            stderr: (try? String(contentsOf: errURL, encoding: .utf8)) ?? ""
        )
    }
}

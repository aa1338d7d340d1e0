import Foundation

/// A command that runs while the test talks to it: reads its output as it comes, writes to its
/// stdin, then collects its exit status. Used for `tokenctl login`, which waits for the user,
/// and for commands that stream (`tokenctl watch`) or must be observed while they run.
final class StreamingCommand: @unchecked Sendable {
    // @unchecked: the buffers are guarded by `lock`; the Process is touched by the owning test.
    private let process = Process()
    private let input = Pipe()
    private let buffers = Buffers()
    /// Signalled by each reader thread at end of file.
    private let finished = DispatchSemaphore(value: 0)

    private final class Buffers: @unchecked Sendable {
        // @unchecked: every access holds `lock`.
        let lock = NSLock()
        var out = ""
        var err = ""
        func append(_ data: Data, toOut: Bool) {
            lock.lock()
            defer { lock.unlock() }
            if toOut { out += String(decoding: data, as: UTF8.self) } else { err += String(decoding: data, as: UTF8.self) }
        }
        var snapshot: (String, String) {
            lock.lock()
            defer { lock.unlock() }
            return (out, err)
        }
    }

    init(_ executable: String, _ arguments: [String]) throws {
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        let out = Pipe()
        let err = Pipe()
        process.standardOutput = out
        process.standardError = err
        process.standardInput = input
        try process.run()
        // Threads, not tasks: a blocking read would hold one of the few cooperative threads,
        // and the test's own tasks would starve.
        let buffers = self.buffers
        let finished = self.finished
        for (pipe, isOut) in [(out, true), (err, false)] {
            Thread.detachNewThread {
                while true {
                    let chunk = pipe.fileHandleForReading.availableData
                    if chunk.isEmpty { break }
                    buffers.append(chunk, toOut: isOut)
                }
                finished.signal()
            }
        }
    }

    var stdout: String { buffers.snapshot.0 }
    var stderr: String { buffers.snapshot.1 }
    var processIdentifier: Int32 { process.processIdentifier }
    var lines: [String] { stdout.split(separator: "\n").map(String.init) }

    /// The first `count` lines of stdout, once there are that many; waits up to `timeout`.
    func waitForLines(_ count: Int, timeout: Duration = .seconds(30)) async throws -> [String] {
        try await pollUntil(timeout: timeout, "\(count) lines of output (got: \(stdout) \(stderr))") { lines.count >= count }
        return lines
    }

    /// The first stdout line that starts with `prefix`, without it; waits up to `timeout`.
    func line(startingWith prefix: String, timeout: Duration = .seconds(30)) async throws -> String {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if let line = stdout.split(separator: "\n").first(where: { $0.hasPrefix(prefix) }) {
                return String(line.dropFirst(prefix.count))
            }
            if !process.isRunning, !stdout.contains(prefix) {
                try await Task.sleep(for: .milliseconds(100))
                if let line = stdout.split(separator: "\n").first(where: { $0.hasPrefix(prefix) }) {
                    return String(line.dropFirst(prefix.count))
                }
                throw TestFailure("the command ended (\(process.terminationStatus)) without printing \(prefix): \(stdout) \(stderr)")
            }
            try await Task.sleep(for: .milliseconds(50))
        }
        throw TestFailure("no line starting with \(prefix) within \(timeout): \(stdout) \(stderr)")
    }

    /// The stdout line after the one that equals `marker`.
    func line(after marker: String, timeout: Duration = .seconds(30)) async throws -> String {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            let lines = stdout.split(separator: "\n", omittingEmptySubsequences: false)
            if let index = lines.firstIndex(where: { $0 == marker }), index + 1 < lines.count, !lines[index + 1].isEmpty,
                stdout.hasSuffix("\n") || index + 2 < lines.count
            {
                return String(lines[index + 1])
            }
            if !process.isRunning { throw TestFailure("the command ended without printing \(marker): \(stdout) \(stderr)") }
            try await Task.sleep(for: .milliseconds(50))
        }
        throw TestFailure("no line after \(marker) within \(timeout): \(stdout) \(stderr)")
    }

    func write(_ text: String) { input.fileHandleForWriting.write(Data(text.utf8)) }

    /// Waits for the exit (killing the command after `timeout`) and returns everything.
    func finish(timeout: Duration = .seconds(60)) async throws -> CommandResult {
        let deadline = ContinuousClock.now + timeout
        while process.isRunning, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(50)) }
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            throw TestFailure("the command did not finish within \(timeout): \(stdout) \(stderr)")
        }
        for _ in 0..<2 {
            while finished.wait(timeout: .now()) == .timedOut { try await Task.sleep(for: .milliseconds(20)) }
        }
        return CommandResult(status: process.terminationStatus, stdout: stdout, stderr: stderr)
    }

    deinit { if process.isRunning { kill(process.processIdentifier, SIGKILL) } }
}

import Dispatch
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Runs a configured command to completion with a deadline: the exec provider's refreshes and
/// the `relogin_command` hook. The child gets only the environment given (plus a fixed `PATH`
/// and `LANG`); its stderr goes nowhere, its stdout is collected up to a limit.
enum CommandRunner {
    enum Result: Sendable {
        case exited(Int32, [UInt8])
        case signalled(Int32)
        case timedOut
    }

    /// Runs `command` (the program, then its arguments) with `input` on stdin.
    /// - Returns: how it ended and its stdout (an empty `{}` object when it wrote more than
    ///   `maximumOutputBytes`).
    /// - Throws: when the program cannot be started.
    static func run(
        _ command: [String], environment: [String: String] = [:], input: [UInt8], timeout: Duration, maximumOutputBytes: Int
    ) async throws -> Result {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: command[0])
        process.arguments = Array(command.dropFirst())
        process.environment = environment.merging(["PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"]) { given, _ in given }
        let stdin = Pipe()
        let stdout = Pipe()
        process.standardInput = stdin
        process.standardOutput = stdout
        process.standardError = FileHandle.nullDevice
        try process.run()
        let pid = process.processIdentifier
        // Write the request and close, so the command sees end of input.
        try? stdin.fileHandleForWriting.write(contentsOf: Data(input))
        try? stdin.fileHandleForWriting.close()
        // The pipe is read with blocking reads, so on a Dispatch thread: tasks run on the event
        // loops (ConcurrencyExecutor), and a read blocked there would stall that loop's sockets
        // and timers, the deadline below included.
        let handle = stdout.fileHandleForReading
        let reader = Task {
            await withCheckedContinuation { (continuation: CheckedContinuation<[UInt8], Never>) in
                DispatchQueue.global().async {
                    var collected: [UInt8] = []
                    while collected.count <= maximumOutputBytes, let chunk = try? handle.read(upToCount: 65536), !chunk.isEmpty {
                        collected.append(contentsOf: chunk)
                    }
                    continuation.resume(returning: collected)
                }
            }
        }
        let deadline = ContinuousClock.now + timeout
        while process.isRunning {
            if ContinuousClock.now >= deadline {
                kill(pid, SIGKILL)
                // Neither waited for nor closed: a child the command started may still hold the
                // pipe, and waiting for the exit or closing the pipe under the blocked read
                // would last as long as that child (Foundation reaps the killed process).
                reader.cancel()
                return .timedOut
            }
            try? await Task.sleep(for: .milliseconds(10))
        }
        let output = await reader.value
        if process.terminationReason == .uncaughtSignal { return .signalled(process.terminationStatus) }
        guard output.count <= maximumOutputBytes else { return .exited(0, Array("{}".utf8)) }
        return .exited(process.terminationStatus, output)
    }
}

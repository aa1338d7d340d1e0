import CTokendShims
import Dispatch
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// Runs a configured command to completion with a deadline: the exec provider's refreshes and
/// the `relogin_command` hook. The child gets only the environment given (plus a fixed `PATH`
/// and `LANG`); its stderr goes nowhere, its stdout is collected up to a limit.
///
/// The child starts a session of its own (`setsid`), with no signal blocked or handled (tokend's
/// own mask is not inherited), and no descriptor of tokend's but its stdin and stdout. At the
/// deadline the whole process group is killed, not only the program: what it started dies with
/// it. The program is reaped only after that, so its group id cannot have been reused by then.
/// A process that left the group on purpose (`setsid`, `setpgid`) is beyond this; the service's
/// `KillMode=` ends it when tokend stops.
enum CommandRunner {
    enum Result: Sendable {
        case exited(Int32, [UInt8])
        case signalled(Int32)
        case timedOut
    }

    /// The command could not be started.
    struct StartFailure: Error, CustomStringConvertible {
        let description: String
    }

    /// Runs `command` (the program, then its arguments) with `input` on stdin.
    /// - Returns: how it ended and its stdout (an empty `{}` object when it wrote more than
    ///   `maximumOutputBytes`). A program that ends but leaves a process holding its stdout past
    ///   the deadline counts as timed out (its group is killed).
    /// - Throws: ``StartFailure`` when the program cannot be started.
    static func run(
        _ command: [String], environment: [String: String] = [:], input: [UInt8], timeout: Duration, maximumOutputBytes: Int
    ) async throws -> Result {
        let deadline = ContinuousClock.now + timeout
        let child = try Child.spawn(
            command, environment: environment.merging(["PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"]) { given, _ in given })
        // Write the request and close, so the command sees end of input (a command that exits
        // without reading gets EPIPE here, not SIGPIPE: tokend ignores it).
        input.withUnsafeBytes { bytes in
            var offset = 0
            while offset < bytes.count {
                let written = write(child.stdin, bytes.baseAddress! + offset, bytes.count - offset)
                if written < 0, errno == EINTR { continue }
                guard written > 0 else { break }
                offset += written
            }
        }
        close(child.stdin)
        // The pipe is read with blocking reads, so on a Dispatch thread: tasks run on the event
        // loops (ConcurrencyExecutor), and a read blocked there would stall that loop's sockets
        // and timers, the deadline below included.
        let output = OutputCollector(descriptor: child.stdout, limit: maximumOutputBytes)
        var exited = false
        while !(exited && output.isFinished) {
            exited = exited || child.hasExited
            if ContinuousClock.now >= deadline {
                child.killGroup()
                await child.reap()
                // The collector is not waited for: a process that left the group may still
                // hold the pipe. It closes its end itself when the pipe reaches its end.
                return .timedOut
            }
            try? await Task.sleep(for: .milliseconds(10))
        }
        let status = await child.reap()
        let collected = output.collected
        if let signal = status.signal { return .signalled(signal) }
        guard collected.count <= maximumOutputBytes else { return .exited(0, Array("{}".utf8)) }
        return .exited(status.exitCode, collected)
    }
}

/// A spawned command: its pid (also its process group and session) and our ends of its pipes.
private struct Child {
    let pid: pid_t
    let stdin: CInt
    let stdout: CInt

    /// How the program ended, from `waitpid`'s status.
    struct Status {
        let raw: CInt
        var signal: Int32? { raw & 0x7f == 0 ? nil : raw & 0x7f }
        var exitCode: Int32 { (raw >> 8) & 0xff }
    }

    static func spawn(_ command: [String], environment: [String: String]) throws -> Child {
        var input: [CInt] = [-1, -1]
        var output: [CInt] = [-1, -1]
        guard tokend_pipe_cloexec(&input) == 0 else { throw CommandRunner.StartFailure(description: "pipe: \(errorText())") }
        guard tokend_pipe_cloexec(&output) == 0 else {
            close(input[0])
            close(input[1])
            throw CommandRunner.StartFailure(description: "pipe: \(errorText())")
        }
        defer {
            // The child's ends, in the parent.
            close(input[0])
            close(output[1])
        }
        let arguments = command.map { strdup($0) } + [nil]
        let variables = environment.sorted { $0.key < $1.key }.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            for pointer in arguments + variables { free(pointer) }
        }
        var pid: CInt = 0
        let result = tokend_spawn_session(&pid, command[0], arguments, variables, input[0], output[1])
        guard result == 0 else {
            close(input[1])
            close(output[0])
            throw CommandRunner.StartFailure(description: "\(command[0]): \(errorText(result))")
        }
        return Child(pid: pid, stdin: input[1], stdout: output[0])
    }

    /// Whether the program has ended, without reaping it (its pid and group stay reserved).
    var hasExited: Bool {
        let ended = tokend_child_has_ended(pid)
        return ended == 1 || (ended < 0 && errno == ECHILD)
    }

    /// SIGKILL to the program and everything in its process group. Called only before the
    /// program is reaped: until then no other process can have its id as a group id.
    func killGroup() {
        kill(-pid, SIGKILL)
        kill(pid, SIGKILL)
    }

    /// Waits for the program (ended, or killed) and collects its status.
    @discardableResult
    func reap() async -> Status {
        var status: CInt = 0
        while true {
            let result = waitpid(pid, &status, WNOHANG)
            if result == pid { return Status(raw: status) }
            if result < 0, errno != EINTR { return Status(raw: SIGKILL) }
            try? await Task.sleep(for: .milliseconds(5))
        }
    }
}

/// Reads a command's stdout on a Dispatch thread until its end (or past `limit`), then closes it.
private final class OutputCollector: Sendable {
    private let state = Mutex<(bytes: [UInt8], finished: Bool)>(([], false))

    init(descriptor: CInt, limit: Int) {
        DispatchQueue.global().async { [self] in
            var collected: [UInt8] = []
            var buffer = [UInt8](repeating: 0, count: 65536)
            while collected.count <= limit {
                let count = buffer.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
                if count < 0, errno == EINTR { continue }
                guard count > 0 else { break }
                collected.append(contentsOf: buffer[..<count])
            }
            close(descriptor)
            self.state.withLock { $0 = (collected, true) }
        }
    }

    var isFinished: Bool { state.withLock { $0.finished } }
    var collected: [UInt8] { state.withLock { $0.bytes } }
}

private func errorText(_ code: CInt = errno) -> String { String(cString: strerror(code)) }

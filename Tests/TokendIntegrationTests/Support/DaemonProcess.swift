import Foundation
import Testing
import TokendTestSupport

/// Paths of this checkout, found from this file's location.
enum Repository {
    static let root: String = {
        var url = URL(fileURLWithPath: #filePath)
        for _ in 0..<3 { url.deleteLastPathComponent() }  // Support → TokendIntegrationTests → Tests → root
        return url.deletingLastPathComponent().path
    }()

    /// A built executable: `$TOKEND_BIN_DIR/NAME`, else `.build/debug/NAME`.
    static func binary(_ name: String) -> String {
        let directory = ProcessInfo.processInfo.environment["TOKEND_BIN_DIR"] ?? root + "/.build/debug"
        return directory + "/" + name
    }
}

/// A scratch directory for one test, world-traversable so that clients run as other uids can
/// reach the socket inside it. Short path: Unix socket paths are limited to 107 bytes.
final class ScratchDirectory: @unchecked Sendable {
    // @unchecked: immutable after init.
    let path: String

    init() throws {
        let template = "/tmp/tokend-test-XXXXXX"
        var bytes = Array(template.utf8CString)
        guard let result = mkdtemp(&bytes) else { throw TestFailure("mkdtemp failed") }
        path = String(cString: result)
        chmod(path, 0o755)
    }

    func file(_ name: String) -> String { path + "/" + name }

    func write(_ name: String, _ text: String, mode: mode_t = 0o644) throws {
        try text.write(toFile: file(name), atomically: true, encoding: .utf8)
        chmod(file(name), mode)
    }

    /// `TOKEND_KEEP_SCRATCH=1` keeps every test's directory (logs, stores, the IdP's state) for
    /// a post-mortem.
    deinit {
        if ProcessInfo.processInfo.environment["TOKEND_KEEP_SCRATCH"] == nil { try? FileManager.default.removeItem(atPath: path) }
    }
}

struct TestFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// The real `tokend` binary, started on a configuration in a scratch directory.
final class DaemonProcess: @unchecked Sendable {
    // @unchecked: the Process is only touched from the test that owns this object.
    let directory: ScratchDirectory
    let process = Process()
    let logPath: String
    var socketPath: String { directory.file("tokend.sock") }
    var stateDirectory: String { directory.file("state") }

    /// Writes `tokend.toml` (daemon section plus `extra`) and a client secret file.
    /// `extraDaemon` lines (`key = value`) replace the defaults of the same key.
    static func configuration(extraDaemon: String = "", providers: String = DaemonProcess.defaultProviders) -> String {
        var lines = [
            #"socket = "tokend.sock""#, #"state_directory = "state""#, #"key_file = "state/tokend.key""#,
            "max_connections = 64", "max_message_bytes = 4096", #"call_timeout = "5s""#, #"log_level = "debug""#,
        ]
        func key(_ line: String) -> String { line.split(separator: "=").first.map { $0.trimmingCharacters(in: .whitespaces) } ?? "" }
        for extra in extraDaemon.split(separator: "\n").map(String.init) where !key(extra).isEmpty {
            lines.removeAll { key($0) == key(extra) }
            lines.append(extra)
        }
        return "[daemon]\n" + lines.joined(separator: "\n") + "\n\n" + providers + "\n"
    }

    static let defaultProviders = """
        [providers.example]
        kind = "oauth2"
        token_endpoint = "http://127.0.0.1:9/o/token/"
        client_id = "tokend-test"
        client_secret_file = "client-secret"
        client_auth = "client_secret_basic"
        """

    init(configuration: String = DaemonProcess.configuration(), directory: ScratchDirectory? = nil) throws {
        self.directory = try directory ?? ScratchDirectory()
        try self.directory.write("tokend.toml", configuration)
        try self.directory.write("client-secret", "test-client-secret\n", mode: 0o600)
        logPath = self.directory.file("tokend.log")
        FileManager.default.createFile(atPath: logPath, contents: nil)
    }

    /// A started daemon whose configuration writes `user`'s access token to `tokens/<user>` (a
    /// token file with `mode`), in a new scratch directory.
    static func startWithTokenFile(user: String, mode: String, extra: String = "") async throws -> (ScratchDirectory, DaemonProcess) {
        let directory = try ScratchDirectory()
        try FileManager.default.createDirectory(atPath: directory.file("tokens"), withIntermediateDirectories: true)
        let config =
            DaemonProcess.configuration() + """

                [token_files.\(user)]
                path = "tokens/\(user)"
                mode = "\(mode)"
                """ + extra
        let daemon = try DaemonProcess(configuration: config, directory: directory)
        try await daemon.start()
        return (directory, daemon)
    }

    /// Starts the daemon and waits until its socket accepts connections. `environment` is
    /// added to the test's own (e.g. `https_proxy`).
    ///
    /// The socket is checked once more after the deadline: on a loaded 2-core machine the tests'
    /// own blocking calls can keep this poller from running for longer than the daemon needs.
    func start(timeout: Duration = .seconds(60), environment: [String: String] = [:]) async throws {
        process.executableURL = URL(fileURLWithPath: Repository.binary("tokend"))
        process.arguments = ["--config", directory.file("tokend.toml")]
        if !environment.isEmpty { process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 } }
        let log = FileHandle(forWritingAtPath: logPath)!
        log.seekToEndOfFile()
        process.standardOutput = log
        process.standardError = log
        try process.run()
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if !process.isRunning { throw TestFailure("tokend exited with \(process.terminationStatus): \(self.log)") }
            if RawClient.canConnect(socketPath) { return }
            try await Task.sleep(for: .milliseconds(50))
        }
        if process.isRunning, RawClient.canConnect(socketPath) { return }
        throw TestFailure("tokend did not listen within \(timeout): \(self.log)")
    }

    /// Sends SIGTERM and waits for the process to exit.
    @discardableResult
    func stop(signal: Int32 = SIGTERM, timeout: Duration = .seconds(20)) async throws -> Int32 {
        try await terminate(process, signal: signal, timeout: timeout)
    }

    var log: String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }

    /// Sends `signal` (SIGHUP: reload) without waiting.
    func send(signal: Int32) { kill(process.processIdentifier, signal) }

    deinit {
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
    }
}

/// Sends `signal` and waits for the process to exit; SIGKILLs it and fails after `timeout`.
@discardableResult
func terminate(_ process: Process, signal: Int32 = SIGTERM, timeout: Duration = .seconds(20)) async throws -> Int32 {
    guard process.isRunning else { return process.terminationStatus }
    kill(process.processIdentifier, signal)
    let deadline = ContinuousClock.now + timeout
    while process.isRunning, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(20)) }
    if process.isRunning {
        kill(process.processIdentifier, SIGKILL)
        throw TestFailure("\(process.executableURL?.lastPathComponent ?? "process") did not stop within \(timeout) of signal \(signal)")
    }
    return process.terminationStatus
}

/// Runs a command to completion with a time limit and returns its exit status and output.
struct CommandResult {
    var status: Int32
    var stdout: String
    var stderr: String
}

func runCommand(_ executable: String, _ arguments: [String], stdin: String? = nil, timeout: Duration = .seconds(20)) async throws
    -> CommandResult
{
    let result: ChildProcess.Output
    do {
        result = try await ChildProcess.run(executable, arguments, stdin: stdin, timeout: timeout)
    } catch let failure as ChildProcess.Failure {
        throw TestFailure(failure.description)
    }
    return CommandResult(status: result.status, stdout: result.stdout, stderr: result.stderr)
}

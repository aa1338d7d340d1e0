import Foundation
import TokendTestSupport

/// The real HTTP proxy of the proxy tests: Debian's tinyproxy 1.11, run in the foreground on
/// 127.0.0.1 with a configuration of its own in the test's scratch directory (never anything in
/// `/etc/tinyproxy`). It serves only 127.0.0.1 clients, tunnels `CONNECT` to any port (there is no
/// `ConnectPort` line; one would restrict `CONNECT` to the listed ports, others getting `403 Access
/// violation`), logs every request, and with `credentials` requires Basic proxy authentication.
///
/// What tinyproxy 1.11.1 answers a request when `credentials` are set (all HTTP/1.0, and the
/// connection is closed on a failure):
/// - no `Proxy-Authorization` header: `407 Proxy Authentication Required` with
///   `Proxy-Authenticate: Basic realm="Tinyproxy"`;
/// - a wrong one (bad user or password, another scheme): `401 Unauthorized` with
///   `WWW-Authenticate: Basic realm="Tinyproxy"`, not 407;
/// - the right one: `200 Connection established` for a `CONNECT`.
/// Refusals are not logged; the request line is, before the check (see ``connects``).
///
/// Run as root without a `User` line, tinyproxy keeps running as root (it only logs a warning),
/// so the scratch directory needs no special permissions.
final class Tinyproxy: @unchecked Sendable {
    // @unchecked: owned by one test at a time.
    static let executable = "/usr/bin/tinyproxy"

    /// Whether tinyproxy is installed (`scripts/setup-host.sh` installs it); tests that need it
    /// are skipped with a clear message when it is not.
    static var isAvailable: Bool { FileManager.default.isExecutableFile(atPath: executable) }

    let port: Int
    let configurationPath: String
    let logPath: String
    /// tinyproxy's stdout and stderr: where it reports a configuration it cannot parse or a port
    /// it cannot bind (the log file may stay empty then).
    let outputPath: String
    private let process = Process()

    /// The proxy URL to give a client (`HTTPS_PROXY`, a `proxy` setting).
    var url: String { "http://127.0.0.1:\(port)" }

    /// Writes the configuration. `credentials` may only use letters, digits, `.`, `_` and `-`
    /// (tinyproxy refuses to parse anything else) and are compared case-sensitively.
    init(directory: ScratchDirectory, credentials: (user: String, password: String)? = nil) throws {
        port = try FreePort.pick()
        configurationPath = directory.file("tinyproxy.conf")
        logPath = directory.file("tinyproxy.log")
        outputPath = directory.file("tinyproxy.out")
        var lines = [
            "Port \(port)",
            "Listen 127.0.0.1",
            "Allow 127.0.0.1",
            "LogFile \"\(logPath)\"",
            // Info: the request lines (level Connect) plus why a connection failed.
            "LogLevel Info",
        ]
        if let credentials {
            let allowed = Set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
            for word in [credentials.user, credentials.password] where word.isEmpty || !word.allSatisfy(allowed.contains) {
                throw TestFailure("tinyproxy cannot take the credential \"\(word)\": only letters, digits, '.', '_' and '-'")
            }
            lines.append("BasicAuth \(credentials.user) \(credentials.password)")
        }
        try directory.write("tinyproxy.conf", lines.joined(separator: "\n") + "\n")
        _ = FileManager.default.createFile(atPath: logPath, contents: nil)
        _ = FileManager.default.createFile(atPath: outputPath, contents: nil)
    }

    /// Starts `tinyproxy -d -c tinyproxy.conf` and waits until it accepts connections.
    ///
    /// It is started through `env --default-signal=TERM`, which unblocks SIGTERM and then execs
    /// tinyproxy (same pid): a child of the test process inherits its threads' signal mask, in
    /// which SIGTERM is blocked, and tinyproxy never unblocks it, so it would ignore ``stop()``'s
    /// SIGTERM and only go on SIGKILL.
    func start(timeout: Duration = .seconds(20)) async throws {
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["--default-signal=TERM", Self.executable, "-d", "-c", configurationPath]
        guard let output = FileHandle(forWritingAtPath: outputPath) else { throw TestFailure("cannot open \(outputPath)") }
        defer { try? output.close() }
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = output
        process.standardError = output
        try process.run()
        let deadline = ContinuousClock.now + timeout
        // The log line comes once tinyproxy has bound its port: whatever else may have taken the
        // port since `FreePort.pick()` does not count (tinyproxy then exits with status 71).
        // The probe leaves `ERROR ... read_request_line: Client (file descriptor: 5) closed socket before read.` in the log.
        while !(log.contains("Accepting connections") && FreePort.isListening(port)) {
            guard process.isRunning else {
                throw TestFailure("tinyproxy exited with status \(process.terminationStatus): \(diagnostics)")
            }
            guard ContinuousClock.now < deadline else {
                await stop()
                throw TestFailure("tinyproxy did not listen on 127.0.0.1:\(port) within \(timeout): \(diagnostics)")
            }
            try await Task.sleep(for: .milliseconds(50))
        }
    }

    /// Stops tinyproxy: SIGTERM (it exits within 50 ms to about 1.5 s, once its threads are down),
    /// then SIGKILL after 5 seconds.
    func stop() async {
        guard process.processIdentifier > 0 else { return }
        if process.isRunning { kill(process.processIdentifier, SIGTERM) }
        let deadline = ContinuousClock.now + .seconds(5)
        while process.isRunning, ContinuousClock.now < deadline { try? await Task.sleep(for: .milliseconds(50)) }
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
    }

    deinit { if process.processIdentifier > 0, process.isRunning { kill(process.processIdentifier, SIGKILL) } }

    var log: String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }
    var output: String { (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? "" }
    private var diagnostics: String { "output: \(output)\nlog: \(log)" }

    /// The targets of the `CONNECT` requests tinyproxy read, in order (e.g. `["localhost:43123"]`),
    /// from log lines such as
    /// `CONNECT   Nov 25 11:07:53.707 [30156]: Request (file descriptor 5): CONNECT localhost:43123 HTTP/1.1`.
    /// The line is logged before the authentication and `ConnectPort` checks, so requests that were
    /// refused (407, 401, 403) are listed too; a tunnel that was opened is followed by
    /// `Established connection to host "localhost" using file descriptor N.`
    var connects: [String] {
        log.split(separator: "\n").compactMap { line -> String? in
            guard line.contains("]: Request (file descriptor "), let marker = line.range(of: "): CONNECT ") else { return nil }
            return line[marker.upperBound...].split(separator: " ").first.map(String.init)
        }
    }
}

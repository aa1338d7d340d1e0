import Foundation
import Testing
import TokendTestSupport

/// The real OAuth 2.0 authorization server used by the tests: django-oauth-toolkit, run by
/// `Tests/idp/idp.py` from the venv that `scripts/test` prepares, on 127.0.0.1.
final class IdentityProvider: @unchecked Sendable {
    // @unchecked: owned by one test at a time.
    struct Options {
        var accessTokenLifetime = 3600
        var refreshGrace = 0
        var reuseProtection = false
        var rotate = true
        var tls: (cert: String, key: String)?
        var oidc = false
        /// More `idp.py serve` arguments (e.g. `--device-flow --device-interval 1`).
        var extraArguments: [String] = []
    }

    let stateDirectory: String
    /// The port it listens on: picked free before the start (so configurations can name it),
    /// and picked again if another server took it before the IdP bound it.
    private(set) var port: Int
    let options: Options
    private var process = Process()
    private let logPath: String

    static var python: String {
        let venv = ProcessInfo.processInfo.environment["TOKEND_VENV"] ?? Repository.root + "/.venv"
        return venv + "/bin/python"
    }

    static var script: String { Repository.root + "/Tests/idp/idp.py" }

    /// Whether the venv exists (it is made by `scripts/test`); tests that need the IdP are
    /// skipped with a clear message when it does not.
    static var isAvailable: Bool { FileManager.default.isExecutableFile(atPath: python) }

    var scheme: String { options.tls == nil ? "http" : "https" }
    var tokenEndpoint: String { "\(scheme)://127.0.0.1:\(port)/o/token/" }
    var revocationEndpoint: String { "\(scheme)://127.0.0.1:\(port)/o/revoke_token/" }
    /// The OpenID Connect issuer (with `--oidc`).
    var issuer: String { "\(scheme)://127.0.0.1:\(port)/o" }
    static let clientID = "tokend-test"
    static let clientSecret = "tokend-test-secret"

    init(directory: ScratchDirectory, options: Options = Options()) throws {
        stateDirectory = directory.file("idp")
        try FileManager.default.createDirectory(atPath: stateDirectory, withIntermediateDirectories: true)
        port = try FreePort.pick()
        self.options = options
        logPath = directory.file("idp.log")
        FileManager.default.createFile(atPath: logPath, contents: nil)
    }

    func start(timeout: Duration = .seconds(90)) async throws {
        // A port picked free can be taken by another test's server before the IdP binds it
        // (the suite starts many servers at once): then the IdP exits at once saying so, and
        // starts again on another port. Bounded: three attempts.
        for attempt in 1...3 {
            let logged = log.utf8.count
            do {
                try await startOnce(timeout: timeout)
                return
            } catch {
                guard attempt < 3, String(log.utf8.dropFirst(logged)).map({ $0.contains("Address already in use") }) == true else {
                    throw error
                }
                port = try FreePort.pick()
                process = Process()
            }
        }
    }

    private func startOnce(timeout: Duration) async throws {
        var arguments = [
            Self.script, "serve", "--port", "\(port)", "--state-dir", stateDirectory,
            "--access-token-lifetime", "\(options.accessTokenLifetime)", "--refresh-grace", "\(options.refreshGrace)",
        ]
        if options.reuseProtection { arguments.append("--reuse-protection") }
        arguments.append(options.rotate ? "--rotate" : "--no-rotate")
        if let tls = options.tls { arguments += ["--tls-cert", tls.cert, "--tls-key", tls.key] }
        if options.oidc { arguments.append("--oidc") }
        arguments += options.extraArguments
        process.executableURL = URL(fileURLWithPath: Self.python)
        process.arguments = arguments
        let output = Pipe()
        process.standardOutput = output
        let log = FileHandle(forWritingAtPath: logPath)!
        process.standardError = log
        // One of a few start-ups at a time (StartupSlots); the time limit counts from here.
        await StartupSlots.shared.acquire()
        defer { Task { await StartupSlots.shared.release() } }
        try process.run()
        // Wait for "READY <port>": printed once a worker answers, after migrations. (The port
        // alone is not enough: gunicorn binds it before the database is ready.)
        let reading = output.fileHandleForReading
        let ready = Task {
            await onOwnThread { () -> Bool in
                var buffer = Data()
                while true {
                    // `availableData` returns what is there; `read(upToCount:)` would wait for all 256 bytes.
                    let chunk = reading.availableData
                    if chunk.isEmpty { return false }
                    buffer.append(chunk)
                    if String(decoding: buffer, as: UTF8.self).contains("READY") { return true }
                }
            }
        }
        let process = self.process
        let timer = Task {
            try await Task.sleep(for: timeout)
            // Unblocks the reader: the pipe reaches end of file when the server dies.
            if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        }
        defer { timer.cancel() }
        guard await ready.value else { throw TestFailure("the test IdP did not become ready within \(timeout): \(self.log)") }
    }

    /// Stops the server and everything it started. `idp.py` runs gunicorn as a child, and a
    /// child can outlive its parent, so the signals go to the whole process group (Foundation
    /// starts each child as the leader of a new group).
    func stop() async {
        let group = -process.processIdentifier
        guard process.processIdentifier > 0 else { return }
        if process.isRunning { kill(group, SIGTERM) }
        let deadline = ContinuousClock.now + .seconds(15)
        while process.isRunning, ContinuousClock.now < deadline { try? await Task.sleep(for: .milliseconds(50)) }
        // Whatever is left of the group (gunicorn workers) goes too.
        kill(group, SIGKILL)
    }

    deinit { if process.processIdentifier > 0 { kill(-process.processIdentifier, SIGKILL) } }

    var log: String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }

    /// Fresh token pairs for `alice`, as token endpoint responses.
    func mint(count: Int, lifetime: Int? = nil, client: String = IdentityProvider.clientID, scope: String? = nil) async throws
        -> [[String: Any]]
    {
        var arguments = [Self.script, "mint", "--state-dir", stateDirectory, "--count", "\(count)", "--client", client]
        if let scope { arguments += ["--scope", scope] }
        if let lifetime { arguments += ["--lifetime", "\(lifetime)"] }
        let result = try await runCommand(Self.python, arguments, timeout: .seconds(120))
        guard result.status == 0 else { throw TestFailure("mint failed: \(result.stderr)") }
        return try result.stdout.split(separator: "\n").map { try RawClient.object(String($0)) }
    }

    func revoke(refreshToken: String) async throws {
        let result = try await runCommand(
            Self.python, [Self.script, "revoke", "--state-dir", stateDirectory, "--refresh-token", refreshToken])
        guard result.status == 0 else { throw TestFailure("revoke failed: \(result.stderr)") }
    }

    /// What the server holds of an access token: `active`, `scope`, `resource`.
    func tokenInfo(accessToken: String) async throws -> [String: Any] {
        let result = try await runCommand(
            Self.python, [Self.script, "token-info", "--state-dir", stateDirectory, "--access-token", accessToken])
        guard result.status == 0 else { throw TestFailure("token-info failed: \(result.stderr)") }
        return try RawClient.object(result.stdout.trimmingCharacters(in: .whitespacesAndNewlines))
    }

    /// POST requests the server logged for `path`.
    func postCount(path: String = "/o/token/") async throws -> Int {
        let result = try await runCommand(Self.python, [Self.script, "count-posts", "--state-dir", stateDirectory, "--path", path])
        guard result.status == 0, let count = Int(result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)) else {
            throw TestFailure("count-posts failed: \(result.stdout) \(result.stderr)")
        }
        return count
    }

    /// The provider section of a tokend configuration pointing at this server.
    /// The IdP over TLS, with a test CA made in `directory/pki` (`pki/ca.pem`; the server's
    /// certificate names `localhost` and 127.0.0.1), its client secret in `idp-secret`.
    static func startWithTLS(in directory: ScratchDirectory) async throws -> IdentityProvider {
        try requireVenv()
        let pki = directory.file("pki")
        let made = try await runCommand(python, [script, "make-ca", "--out", pki])
        try #require(made.status == 0, "\(made.stderr)")
        let idp = try IdentityProvider(directory: directory, options: .init(tls: (pki + "/server.pem", pki + "/server.key")))
        try await idp.start()
        try directory.write("idp-secret", clientSecret + "\n", mode: 0o600)
        return idp
    }

    func providerConfiguration(name: String = "idp", extra: String = "", endpoint: String? = nil) -> String {
        """
        [providers.\(name)]
        kind = "oauth2"
        token_endpoint = "\(endpoint ?? tokenEndpoint)"
        revocation_endpoint = "\(revocationEndpoint)"
        client_id = "\(Self.clientID)"
        client_secret_file = "idp-secret"
        client_auth = "client_secret_basic"
        \(extra)
        """
    }
}

import Foundation
import Testing
import TokendTestSupport

/// `Tests/idp/faultproxy.py` in front of the test IdP, for faults a real server cannot produce.
final class FaultProxy: @unchecked Sendable {
    // @unchecked: owned by one test.
    let port: Int
    private let process = Process()

    init(upstreamPort: Int, upstreamTLS: Bool = false) throws {
        port = try FreePort.pick()
        process.configurePythonScript(
            "Tests/idp/faultproxy.py", ["--listen", "\(port)", "--upstream", "\(upstreamPort)"] + (upstreamTLS ? ["--upstream-tls"] : []))
    }

    func start() async throws {
        try await process.startListening(on: port, name: "fault proxy")
    }

    var tokenEndpoint: String { "http://127.0.0.1:\(port)/o/token/" }

    /// Sets the fault: `{"mode": …, "retry_after": …, "times": …}`.
    func set(_ fault: [String: Any]) async throws {
        _ = try await request("POST", "/__fault", body: fault)
    }

    func stats() async throws -> [String: Any] { try await request("GET", "/__stats", body: nil) }

    /// Zeroes the counters.
    func resetStats() async throws { _ = try await request("POST", "/__stats/reset", body: nil) }

    private func request(_ method: String, _ path: String, body: [String: Any]?) async throws -> [String: Any] {
        let script = """
            import json, sys, urllib.request
            data = sys.stdin.read().encode() or None
            req = urllib.request.Request(sys.argv[1], data=data, method=sys.argv[2], headers={"Content-Type": "application/json"})
            print(urllib.request.urlopen(req, timeout=10).read().decode())
            """
        let payload = body.map { String(decoding: try! JSONSerialization.data(withJSONObject: $0), as: UTF8.self) } ?? ""
        let result = try await runCommand(
            IdentityProvider.python, ["-c", script, "http://127.0.0.1:\(port)\(path)", method], stdin: payload)
        guard result.status == 0 else { throw TestFailure("proxy control failed: \(result.stderr)") }
        return (try? RawClient.object(result.stdout)) ?? [:]
    }

    /// Stops the proxy and reaps it (see `Process.stopStandIn()`). A test stops the daemon first:
    /// a grant still in flight then ends as the daemon's own stop decides, not as a dropped connection.
    func stop() { process.stopStandIn() }

    /// Takes the server down at once (SIGKILL) and waits until its port refuses connections.
    func bringDown() async throws {
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        let deadline = ContinuousClock.now + .seconds(10)
        while process.isRunning || FreePort.isListening(port), ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(50))
        }
        guard !FreePort.isListening(port) else { throw TestFailure("the fault proxy is still listening") }
    }

    deinit { process.stopStandIn() }
}

/// A tokend set up against the test IdP: the daemon's directory holds the client secret.
struct IdPDaemon {
    let directory: ScratchDirectory
    let idp: IdentityProvider
    let daemon: DaemonProcess

    /// - Parameter forcedRefreshInterval: seconds between two grants a caller may force. A test
    ///   that checks that a second call *within* the interval asks nothing needs an interval longer
    ///   than a loaded machine's pause between two calls.
    static func start(
        idpOptions: IdentityProvider.Options = .init(), providerExtra: String = "", daemonExtra: String = "",
        forcedRefreshInterval: Int = 1, endpoint: ((IdentityProvider) -> String)? = nil
    ) async throws -> IdPDaemon {
        try requireVenv()
        let directory = try ScratchDirectory()
        let idp = try IdentityProvider(directory: directory, options: idpOptions)
        try await idp.start()
        try directory.write("idp-secret", IdentityProvider.clientSecret + "\n", mode: 0o600)
        let providers = idp.providerConfiguration(name: "example", extra: providerExtra, endpoint: endpoint?(idp))
        // The IdP's answers take seconds, not milliseconds, when two suites share two cores: the
        // limits leave room for that and stay inside the test clients' 10 s receive timeout.
        let limits = "http_timeout = \"6s\"\ncall_timeout = \"8s\"\n"
        let config = DaemonProcess.configuration(
            extraDaemon: "forced_refresh_interval = \"\(forcedRefreshInterval)s\"\n" + limits + daemonExtra,
            providers: providers)
        let daemon = try DaemonProcess(configuration: config, directory: directory)
        try await daemon.start()
        return IdPDaemon(directory: directory, idp: idp, daemon: daemon)
    }

    /// Like `start`, with the fault proxy between tokend and the IdP's token endpoint.
    static func startBehindProxy(idpOptions: IdentityProvider.Options = .init(), providerExtra: String = "", daemonExtra: String)
        async throws -> (IdPDaemon, FaultProxy)
    {
        try requireVenv()
        let directory = try ScratchDirectory()
        let idp = try IdentityProvider(directory: directory, options: idpOptions)
        try await idp.start()
        let proxy = try FaultProxy(upstreamPort: idp.port)
        try await proxy.start()
        try directory.write("idp-secret", IdentityProvider.clientSecret + "\n", mode: 0o600)
        let config = DaemonProcess.configuration(
            extraDaemon: daemonExtra,
            providers: idp.providerConfiguration(name: "example", extra: providerExtra, endpoint: proxy.tokenEndpoint)
        )
        let daemon = try DaemonProcess(configuration: config, directory: directory)
        try await daemon.start()
        return (IdPDaemon(directory: directory, idp: idp, daemon: daemon), proxy)
    }

    /// Adds a freshly minted credential for `user` and returns the token response.
    @discardableResult
    func addMinted(_ user: String, lifetime: Int = 3600, client: RawClient) async throws -> [String: Any] {
        let minted = try await idp.mint(count: 1, lifetime: lifetime)[0]
        let reply = try client.call(
            Tokens.addCall(
                user: user, access: minted["access_token"] as! String, refresh: minted["refresh_token"] as? String,
                expiresIn: minted["expires_in"] as? Int ?? lifetime
            ))
        guard reply.errorName == nil else { throw TestFailure("AddCredential failed: \(reply)") }
        return minted
    }

    func stop() async throws {
        try await daemon.stop()
        await idp.stop()
    }
}

extension Process {
    /// Stops a test's stand-in server and reaps it. SIGKILL, not SIGTERM: the test process's
    /// children start with its blocked signals, SIGTERM among them, so a Python stand-in never saw
    /// a SIGTERM and outlived the suite. The stand-ins keep nothing that needs a clean exit.
    ///
    /// Waits at most ten seconds, polling, not in `waitUntilExit()`: if Foundation's monitor ever
    /// stops reaping (see `SpawnedProcess`), a test fails with a message instead of holding a
    /// thread of the cooperative pool for ever.
    func stopStandIn() {
        guard isRunning else { return }
        kill(processIdentifier, SIGKILL)
        let deadline = ContinuousClock.now + .seconds(10)
        while isRunning, ContinuousClock.now < deadline { usleep(5_000) }
        if isRunning {
            Issue.record("\(executableURL?.lastPathComponent ?? "a stand-in") was not reaped within 10 s of SIGKILL")
        }
    }

    /// A Python test helper of this repository, run by the test venv's interpreter, its output discarded.
    func configurePythonScript(_ path: String, _ arguments: [String]) {
        executableURL = URL(fileURLWithPath: IdentityProvider.python)
        self.arguments = [Repository.root + "/" + path] + arguments
        standardOutput = FileHandle.nullDevice
        standardError = FileHandle.nullDevice
    }

    /// Runs the process and waits (at most 20 s) until it accepts connections on `port`.
    func startListening(on port: Int, name: String) async throws {
        try run()
        let deadline = ContinuousClock.now + .seconds(20)
        while !FreePort.isListening(port), ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(50)) }
        guard FreePort.isListening(port) else { throw TestFailure("\(name) did not start") }
    }
}

func requireVenv() throws {
    guard IdentityProvider.isAvailable else {
        throw TestFailure("the test IdP's venv is missing at \(IdentityProvider.python): run scripts/test, which creates it")
    }
}

/// `try requireVenv()` reads as a precondition at the top of a test.
func `#requireVenv`() throws { try requireVenv() }

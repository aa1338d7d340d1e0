import Foundation
import TokendTestSupport

/// `Tests/idp/pda.py`: a stand-in HAT PDA on 127.0.0.1 with an RSA key of its own, which mints
/// tokens with whatever `iat`, `exp`, `iss` and `application` a test needs and can be told to
/// misbehave.
final class StandInPDA: @unchecked Sendable {
    // @unchecked: owned by one test.
    private(set) var port = 0
    let application: String
    private let process = Process()

    /// The PDA's address as its tokens' `iss` carry it.
    var address: String { "127.0.0.1:\(port)" }

    init(application: String = "tokend-test") {
        self.application = application
    }

    func start(timeout: Duration = .seconds(30)) async throws {
        try requireVenv()
        process.executableURL = URL(fileURLWithPath: IdentityProvider.python)
        process.arguments = [Repository.root + "/Tests/idp/pda.py", "--port", "0", "--application", application]
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()
        let reading = output.fileHandleForReading
        let reader = Task {
            await onOwnThread { () -> Int? in
                var buffer = Data()
                while true {
                    let chunk = reading.availableData
                    if chunk.isEmpty { return nil }
                    buffer.append(chunk)
                    let text = String(decoding: buffer, as: UTF8.self)
                    if let line = text.split(separator: "\n").first(where: { $0.hasPrefix("READY ") }) { return Int(line.dropFirst(6)) }
                }
            }
        }
        let process = self.process
        let timer = Task {
            try await Task.sleep(for: timeout)
            if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        }
        defer { timer.cancel() }
        guard let port = await reader.value else { throw TestFailure("the stand-in PDA did not print READY") }
        self.port = port
    }

    /// A `[providers.NAME]` table for this PDA.
    func providerConfiguration(name: String = "pda", extra: String = "") -> String {
        """
        [providers.\(name)]
        kind = "hat"
        scheme = "http"
        address = "\(address)"
        application = "\(application)"
        redirect = "http://127.0.0.1:9/hat/success"
        fallback = "http://127.0.0.1:9/hat/failure"
        \(extra)
        """
    }

    /// Mints a token: `iat`/`exp` in seconds since the epoch, `alg` one of RS256,
    /// RS256-wrong-key, HS256-public-key, none, RS512.
    func mint(iat: Int? = nil, exp: Int? = nil, application: String? = nil, iss: String? = nil, alg: String? = nil) async throws -> String {
        var spec: [String: Any] = [:]
        if let iat { spec["iat"] = iat }
        if let exp { spec["exp"] = exp }
        if let application { spec["application"] = application }
        if let iss { spec["iss"] = iss }
        if let alg { spec["alg"] = alg }
        guard let token = try await request("POST", "/__mint", body: spec)["token"] as? String else { throw TestFailure("mint failed") }
        return token
    }

    /// A new signing key; `/publickey` serves it from now on.
    func rotateKey() async throws { _ = try await request("POST", "/__rotate", body: [:]) }

    /// How renewals are answered: ok, 401, 403, 500, bad-signature, wrong-iss, no-header, same-token.
    func setRenewal(_ mode: String) async throws { _ = try await request("POST", "/__renewal", body: ["mode": mode]) }

    /// Counts: `validate` (renewal calls), `renewed`, `publickey` (key fetches), `rejected`.
    func stats() async throws -> [String: Int] {
        try await request("GET", "/__stats", body: nil).compactMapValues { $0 as? Int }
    }

    private func request(_ method: String, _ path: String, body: [String: Any]?) async throws -> [String: Any] {
        let payload = try body.map { String(decoding: try JSONSerialization.data(withJSONObject: $0), as: UTF8.self) } ?? ""
        let result = try await runCommand(
            IdentityProvider.python, ["-c", Self.clientScript, "http://127.0.0.1:\(port)\(path)", method], stdin: payload)
        guard result.status == 0 else { throw TestFailure("stand-in PDA control failed: \(result.stderr)") }
        return try RawClient.object(result.stdout)
    }

    private static let clientScript = """
        import json, sys, urllib.request
        data = sys.stdin.read().encode() or None
        req = urllib.request.Request(sys.argv[1], data=data, method=sys.argv[2], headers={"Content-Type": "application/json"})
        print(urllib.request.urlopen(req, timeout=10).read().decode())
        """

    /// Stops the PDA and reaps it (see `Process.stopStandIn()`).
    func stop() { process.stopStandIn() }

    deinit { process.stopStandIn() }
}

import Foundation
import Testing
import TokendTestSupport

/// A second real authorization server: Debian's glewlwyd (OAuth 2.0 / OpenID Connect plugin),
/// started by `Tests/idp/glewlwyd/glewlwyd_server.py` on 127.0.0.1 over HTTPS with a test CA,
/// its own state directory, a user `alice` and the clients listed in its README.
final class Glewlwyd: @unchecked Sendable {
    // @unchecked: owned by one test at a time.
    static let script = Repository.root + "/Tests/idp/glewlwyd/glewlwyd_server.py"

    /// Whether glewlwyd is installed (`scripts/setup-host.sh` installs it); tests that need it
    /// are skipped with a clear message when it is not.
    static var isAvailable: Bool { FileManager.default.isExecutableFile(atPath: "/usr/bin/glewlwyd") }

    let stateDirectory: String
    private let process = Process()
    /// What the script printed once the server was provisioned (issuer, endpoints, clients).
    private(set) var info: [String: Any] = [:]

    var issuer: String { info["issuer"] as? String ?? "" }
    var tokenEndpoint: String { info["token_endpoint"] as? String ?? "" }
    var caFile: String { info["ca_file"] as? String ?? "" }
    var logFile: String { info["log_file"] as? String ?? "" }
    static let clientID = "tokend-secret"
    static let clientSecret = "tokend-secret-secret"

    /// The registered clients tokend can be configured as (keys of the script's `clients`).
    enum Client: String, CaseIterable, Sendable, CustomTestStringConvertible {
        case secret
        case privateKeyJWTEC = "pkjwt_ec"
        case privateKeyJWTRSA = "pkjwt_rsa"
        /// `tls_client_auth`: a certificate from the server's test CA.
        case mutualTLS = "mtls"

        var testDescription: String { rawValue }
    }

    /// The client the test's grants and tokend's provider use.
    let client: Client

    init(directory: ScratchDirectory, client: Client = .secret) {
        stateDirectory = directory.file("glewlwyd")
        self.client = client
    }

    private var clientInfo: [String: Any] { (info["clients"] as? [String: Any])?[client.rawValue] as? [String: Any] ?? [:] }
    var clientID: String { clientInfo["client_id"] as? String ?? "" }
    /// The private key of a `private_key_jwt` client (PEM), and its registered `kid`.
    var clientKeyFile: String { clientInfo["key_file"] as? String ?? "" }
    var clientKeyID: String { clientInfo["kid"] as? String ?? "" }
    /// The certificate of a mutual-TLS client (its key is ``clientKeyFile``).
    var clientCertificateFile: String { clientInfo["cert_file"] as? String ?? "" }

    /// Starts the server; `arguments` are more `serve` options (e.g. `--refresh-token-one-use never`).
    func start(_ arguments: [String] = [], timeout: Duration = .seconds(60)) async throws {
        process.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        process.arguments = [Self.script, "serve", "--state-dir", stateDirectory] + arguments
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()
        let reading = output.fileHandleForReading
        let process = self.process
        let timer = Task {
            try await Task.sleep(for: timeout)
            if process.isRunning { kill(-process.processIdentifier, SIGKILL) }
        }
        defer { timer.cancel() }
        // One JSON line once everything is provisioned; end of file if the script died.
        let line = await onOwnThread { () -> String? in
            var buffer = Data()
            while true {
                let chunk = reading.availableData
                if chunk.isEmpty { return nil }
                buffer.append(chunk)
                if let newline = buffer.firstIndex(of: UInt8(ascii: "\n")) {
                    return String(decoding: buffer[..<newline], as: UTF8.self)
                }
            }
        }
        guard let line, let object = try? RawClient.object(line) else {
            throw TestFailure("glewlwyd did not start within \(timeout): \(log)")
        }
        info = object
    }

    /// A token response for `alice` from the resource-owner password grant of ``client``
    /// (what a test seeds tokend with).
    func passwordGrant(scope: String = "openid read offline_access") async throws -> [String: Any] {
        let result = try await runCommand(
            "/usr/bin/python3", [Self.script, "token", "--state-dir", stateDirectory, "--client", client.rawValue, "--scope", scope])
        guard result.status == 0 else { throw TestFailure("password grant failed: \(result.stderr)") }
        return try RawClient.object(result.stdout)
    }

    /// Approves a device login as alice would in her browser.
    func approveDevice(userCode: String) async throws {
        let result = try await runCommand(
            "/usr/bin/python3",
            [Self.script, "approve-device", "--state-dir", stateDirectory, "--client", client.rawValue, "--user-code", userCode])
        guard result.status == 0 else { throw TestFailure("device approval failed: \(result.stderr)") }
    }

    /// glewlwyd's userinfo endpoint: a resource server that checks DPoP proofs (RFC 9449 §7).
    var userinfoEndpoint: String { info["userinfo_endpoint"] as? String ?? "" }

    /// GETs the userinfo endpoint with `headers` ("Name: value" lines, on stdin rather than in
    /// argv since they hold a token): the status, the `DPoP-Nonce` header and the body.
    func userinfo(headers: [String], url: String? = nil) async throws -> (status: Int, nonce: String?, body: String) {
        let script = """
            import json, ssl, sys, urllib.error, urllib.request
            url, ca = sys.argv[1:3]
            headers = dict(line.split(": ", 1) for line in sys.stdin.read().splitlines() if line)
            request = urllib.request.Request(url, headers=headers)
            try:
                with urllib.request.urlopen(request, context=ssl.create_default_context(cafile=ca), timeout=10) as answer:
                    print(json.dumps([answer.status, answer.headers.get("DPoP-Nonce"), answer.read().decode()]))
            except urllib.error.HTTPError as error:
                print(json.dumps([error.code, error.headers.get("DPoP-Nonce"), error.read().decode()]))
            """
        let result = try await runCommand(
            "/usr/bin/python3", ["-c", script, url ?? userinfoEndpoint, caFile], stdin: headers.joined(separator: "\n") + "\n")
        guard result.status == 0, let answer = try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [Any],
            answer.count == 3, let status = answer[0] as? Int
        else { throw TestFailure("the userinfo request failed: \(result.stderr)") }
        return (status, answer[1] as? String, answer[2] as? String ?? "")
    }

    /// A password grant for alice whose tokens glewlwyd binds to a key of the test's own
    /// (`dpop-ec.key`), not tokend's: what a program would hand tokend with `AddCredential`.
    func passwordGrantBoundToAnotherKey() async throws -> [String: Any] {
        let script = """
            import json, sys
            sys.path.insert(0, sys.argv[2])
            import glewlwyd_server as g
            info = g.load_info(sys.argv[1])
            key = sys.argv[1] + "/dpop-ec.key"
            proof = g.dpop_proof(key, g.jwk_from_key(key, "dpop", "ES256"), "POST", info["token_endpoint"])
            form = {"grant_type": "password", "username": info["user"]["username"], "password": info["user"]["password"],
                    "scope": "openid read offline_access"}
            status, _, data = g.token_request(info, "secret", form, extra_headers={"DPoP": proof})
            if status != 200: sys.exit("status %d: %s" % (status, data))
            print(data.decode() if isinstance(data, bytes) else data)
            """
        let result = try await runCommand(
            "/usr/bin/python3", ["-c", script, stateDirectory, (Self.script as NSString).deletingLastPathComponent])
        guard result.status == 0 else { throw TestFailure("the DPoP password grant failed: \(result.stderr)") }
        return try RawClient.object(result.stdout)
    }

    /// The HTTP status and body of a refresh grant sent by the test itself (as `tokend-secret`).
    func refresh(with refreshToken: String) async throws -> (status: Int, body: String) {
        let script = """
            import base64, ssl, sys, urllib.error, urllib.parse, urllib.request
            endpoint, ca, client, secret = sys.argv[1:5]
            token = sys.stdin.read()
            body = urllib.parse.urlencode({"grant_type": "refresh_token", "refresh_token": token}).encode()
            basic = base64.b64encode(f"{client}:{secret}".encode()).decode()
            request = urllib.request.Request(endpoint, data=body, headers={"Authorization": "Basic " + basic})
            try:
                with urllib.request.urlopen(request, context=ssl.create_default_context(cafile=ca), timeout=10) as answer:
                    print(answer.status); print(answer.read().decode())
            except urllib.error.HTTPError as error:
                print(error.code); print(error.read().decode())
            """
        // The token goes on stdin, not in argv.
        let result = try await runCommand(
            "/usr/bin/python3",
            ["-c", script, tokenEndpoint, caFile, Self.clientID, Self.clientSecret], stdin: refreshToken)
        let lines = result.stdout.split(separator: "\n", maxSplits: 1).map(String.init)
        guard result.status == 0, let status = lines.first.flatMap({ Int($0) }) else {
            throw TestFailure("the refresh request failed: \(result.stderr)")
        }
        return (status, lines.count > 1 ? lines[1] : "")
    }

    /// Stops the script, which stops glewlwyd (a session of its own); whatever is left is killed.
    func stop() async {
        guard process.processIdentifier > 0 else { return }
        if process.isRunning { kill(process.processIdentifier, SIGTERM) }
        let deadline = ContinuousClock.now + .seconds(15)
        while process.isRunning, ContinuousClock.now < deadline { try? await Task.sleep(for: .milliseconds(50)) }
        killAll()
    }

    private func killAll() {
        if let server = info["pid"] as? Int, server > 0 { kill(Int32(server), SIGKILL) }
        if process.processIdentifier > 0 { kill(-process.processIdentifier, SIGKILL) }
    }

    deinit { killAll() }

    var log: String { (try? String(contentsOfFile: stateDirectory + "/glewlwyd.log", encoding: .utf8)) ?? "" }
}

import Foundation
import Testing
import TokendTestSupport

/// PyPI's google-auth with an external-account credential whose executable is
/// `tokenctl google-credential`, exchanging the token at `Tests/interop/sts_stub.py`
/// (RFC 8693) on 127.0.0.1.
@Suite(.serialized)
struct GoogleExternalAccountTests {
    static let tokenctl = Repository.binary("tokenctl")
    static let audience = "//iam.googleapis.com/projects/123/locations/global/workloadIdentityPools/tokend/providers/idp"

    /// The STS stand-in; its log has one `exchange FINGERPRINT TYPE AUDIENCE` line per exchange.
    final class STSStub: @unchecked Sendable {
        // @unchecked: owned by one test.
        let port: Int
        let logPath: String
        private let process = Process()

        init(directory: ScratchDirectory) throws {
            port = try FreePort.pick()
            logPath = directory.file("sts.log")
            FileManager.default.createFile(atPath: logPath, contents: nil)
            process.configurePythonScript("Tests/interop/sts_stub.py", ["--port", "\(port)", "--log", logPath])
        }

        func start() async throws { try await process.startListening(on: port, name: "sts_stub.py") }

        var exchanges: [String] {
            ((try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
        }

        func stop() { process.stopStandIn() }

        deinit { process.stopStandIn() }
    }

    /// Writes the credential configuration for `user` and runs google-auth on it.
    static func googleAuth(user: String, setup: IdPDaemon, sts: STSStub, allowExecutables: Bool = true) async throws -> [String: Any] {
        let configuration: [String: Any] = [
            "type": "external_account", "audience": audience, "subject_token_type": "urn:ietf:params:oauth:token-type:jwt",
            "token_url": "http://127.0.0.1:\(sts.port)/v1/token",
            "credential_source": [
                "executable": [
                    "command": "\(tokenctl) --socket \(setup.daemon.socketPath) google-credential \(user)", "timeout_millis": 30000,
                ]
            ],
        ]
        let path = setup.directory.file("google-\(user).json")
        try JSONSerialization.data(withJSONObject: configuration).write(to: URL(fileURLWithPath: path))
        let result = try await ChildProcess.run(
            IdentityProvider.python, [Repository.root + "/Tests/interop/google_external_account.py", path],
            environment: ["GOOGLE_EXTERNAL_ACCOUNT_ALLOW_EXECUTABLES": allowExecutables ? "1" : "0"], timeout: .seconds(90))
        try #require(result.status == 0, "\(result.stderr)")
        return try RawClient.object(result.stdout.trimmingCharacters(in: .whitespacesAndNewlines))
    }

    @Test func googleAuthExchangesTheCurrentTokenAndFollowsARotation() async throws {
        let setup = try await IdPDaemon.start()
        let client = try RawClient(path: setup.daemon.socketPath)
        let minted = try await setup.addMinted("alice", lifetime: 3600, client: client)
        let sts = try STSStub(directory: setup.directory)
        try await sts.start()
        defer { sts.stop() }

        let first = try await Self.googleAuth(user: "alice", setup: setup, sts: sts)
        #expect(first["refreshed"] as? Int == 1 && first["valid"] as? Bool == true, "\(first)")
        let fingerprint = try await tokenFingerprint(minted["access_token"] as! String)
        #expect(sts.exchanges == ["exchange \(fingerprint) urn:ietf:params:oauth:token-type:jwt \(Self.audience)"], "\(sts.exchanges)")

        // tokend replaces the token: the next refresh runs tokenctl again and sends the new one.
        let rotated = try client.call(Tokens.tokenCall(user: "alice", rejected: minted["access_token"] as? String))
        let newToken = try #require(rotated.accessToken)
        #expect(newToken != minted["access_token"] as? String)
        let second = try await Self.googleAuth(user: "alice", setup: setup, sts: sts)
        #expect(second["refreshed"] as? Int == 1, "\(second)")
        let newFingerprint = try await tokenFingerprint(newToken)
        #expect(sts.exchanges.count == 2 && sts.exchanges.last?.hasPrefix("exchange \(newFingerprint) ") == true, "\(sts.exchanges)")

        // google-auth runs no executable unless allowed.
        let refused = try await Self.googleAuth(user: "alice", setup: setup, sts: sts, allowExecutables: false)
        #expect((refused["error"] as? String)?.contains("GOOGLE_EXTERNAL_ACCOUNT_ALLOW_EXECUTABLES") == true, "\(refused)")
        #expect(sts.exchanges.count == 2)
        try await setup.stop()
    }

    @Test func failuresReachGoogleAuthWithTheirReasonAndNothingIsExchanged() async throws {
        let setup = try await IdPDaemon.start()
        let client = try RawClient(path: setup.daemon.socketPath)
        let sts = try STSStub(directory: setup.directory)
        try await sts.start()
        defer { sts.stop() }

        let unknown = try await Self.googleAuth(user: "nobody", setup: setup, sts: sts)
        let unknownError = try #require(unknown["error"] as? String, "\(unknown)")
        #expect(unknownError.contains("tokend has no credential for user"), "\(unknownError)")
        #expect(unknownError.contains("unknownUser"), "\(unknownError)")

        // A login that has ended: the reason says what to do.
        let carol = try await setup.addMinted("carol", lifetime: 3600, client: client)
        try await setup.idp.revoke(refreshToken: carol["refresh_token"] as! String)
        _ = try client.call(Tokens.tokenCall(user: "carol", minValid: 7200))
        let ended = try await Self.googleAuth(user: "carol", setup: setup, sts: sts)
        let endedError = try #require(ended["error"] as? String, "\(ended)")
        #expect(endedError.contains("log in again: tokenctl login carol"), "\(endedError)")
        #expect(sts.exchanges.isEmpty, "\(sts.exchanges)")

        // tokenctl's own answer: the response on stdout, the reason on stderr, exit status 4.
        let direct = try await runCommand(Self.tokenctl, ["--socket", setup.daemon.socketPath, "google-credential", "nobody"])
        #expect(direct.status == 4, "\(direct)")
        let response = try RawClient.object(direct.stdout)
        #expect(response["version"] as? Int == 1 && response["success"] as? Bool == false && response["code"] as? String == "unknownUser")
        #expect(direct.stderr.contains("tokend has no credential for user 'nobody'"))
        try await setup.stop()
    }
}

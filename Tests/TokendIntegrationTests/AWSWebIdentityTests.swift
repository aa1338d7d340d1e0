import Foundation
import Testing
import TokendTestSupport

/// PyPI's boto3/botocore with a profile whose `web_identity_token_file` is a tokend token file,
/// against `moto_server` on 127.0.0.1 (STS AssumeRoleWithWebIdentity, recorded by moto).
@Suite(.serialized)
struct AWSWebIdentityTests {
    /// moto's server from the test venv, recording every request.
    final class MotoServer: @unchecked Sendable {
        // @unchecked: owned by one test.
        let port: Int
        private let process = Process()

        init(directory: ScratchDirectory) throws {
            port = try FreePort.pick()
            let binary = URL(fileURLWithPath: IdentityProvider.python).deletingLastPathComponent().appendingPathComponent("moto_server")
                .path
            try #require(FileManager.default.isExecutableFile(atPath: binary), "moto is installed by scripts/test-venv.sh")
            process.executableURL = URL(fileURLWithPath: binary)
            process.arguments = ["-H", "127.0.0.1", "-p", "\(port)"]
            var environment = ProcessInfo.processInfo.environment
            environment["MOTO_ENABLE_RECORDING"] = "True"
            environment["MOTO_RECORDER_FILEPATH"] = directory.file("moto-recording")
            process.environment = environment
            let log = directory.file("moto.log")
            FileManager.default.createFile(atPath: log, contents: nil)
            let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: log))
            process.standardOutput = handle
            process.standardError = handle
        }

        func start() async throws { try await process.startListening(on: port, name: "moto_server") }

        func stop() { process.stopStandIn() }

        deinit { process.stopStandIn() }
    }

    /// Runs boto3 with the profile; returns its answer (`arn` and `sent`, or `error`).
    static func boto3(_ directory: ScratchDirectory, moto: MotoServer) async throws -> [String: Any] {
        let result = try await ChildProcess.run(
            IdentityProvider.python,
            [Repository.root + "/Tests/interop/aws_web_identity.py", "--profile", "tokend", "--endpoint", "http://127.0.0.1:\(moto.port)"],
            environment: [
                "AWS_CONFIG_FILE": directory.file("aws-config"), "AWS_SHARED_CREDENTIALS_FILE": directory.file("no-credentials"),
                "AWS_EC2_METADATA_DISABLED": "true", "AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": "", "AWS_PROFILE": "",
            ], timeout: .seconds(90))
        try #require(result.status == 0, "\(result.stderr)")
        return try RawClient.object(result.stdout.trimmingCharacters(in: .whitespacesAndNewlines))
    }

    @Test func botocoreSendsTheTokenFileAndRereadsItAfterARotation() async throws {
        let setup = try await IdPDaemon.start(providerExtra: "\n[token_files.alice]\npath = \"alice-web-identity\"\nmode = \"0600\"\n")
        let client = try RawClient(path: setup.daemon.socketPath)
        let minted = try await setup.addMinted("alice", lifetime: 3600, client: client)
        let tokenFile = setup.directory.file("alice-web-identity")
        let moto = try MotoServer(directory: setup.directory)
        try await moto.start()
        defer { moto.stop() }
        try setup.directory.write(
            "aws-config",
            """
            [profile tokend]
            role_arn = arn:aws:iam::123456789012:role/tokend-test
            web_identity_token_file = \(tokenFile)
            role_session_name = alice
            region = us-east-1
            endpoint_url = http://127.0.0.1:\(moto.port)

            """)
        func waitForFile(_ token: String) async throws {
            let deadline = ContinuousClock.now + .seconds(30)
            while (try? String(contentsOfFile: tokenFile, encoding: .utf8)) != token, ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(50))
            }
            try #require((try? String(contentsOfFile: tokenFile, encoding: .utf8)) == token, "the token file did not get the token")
        }
        let first = minted["access_token"] as! String
        try await waitForFile(first)

        let answer = try await Self.boto3(setup.directory, moto: moto)
        #expect((answer["arn"] as? String)?.contains(":assumed-role/tokend-test/alice") == true, "\(answer)")
        #expect(answer["sent"] as? [String] == [try await tokenFingerprint(first)], "\(answer)")

        // tokend replaces the token and rewrites the file; botocore reads the new one.
        let rotated = try client.call(Tokens.tokenCall(user: "alice", rejected: first))
        let second = try #require(rotated.accessToken)
        #expect(second != first)
        try await waitForFile(second)
        let again = try await Self.boto3(setup.directory, moto: moto)
        #expect(again["arn"] != nil, "\(again)")
        #expect(again["sent"] as? [String] == [try await tokenFingerprint(first), try await tokenFingerprint(second)], "\(again)")

        // The login ends: tokend deletes the file, and botocore has no token to send.
        for refreshToken in try await setup.idp.refreshTokens(client: IdentityProvider.clientID) {
            try? await setup.idp.revoke(refreshToken: refreshToken)
        }
        _ = try client.call(Tokens.tokenCall(user: "alice", minValid: 7200))
        let deadline = ContinuousClock.now + .seconds(30)
        while FileManager.default.fileExists(atPath: tokenFile), ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(50))
        }
        #expect(!FileManager.default.fileExists(atPath: tokenFile))
        let ended = try await Self.boto3(setup.directory, moto: moto)
        #expect(ended["error"] != nil && (ended["sent"] as? [String])?.count == 2, "\(ended)")
        try await setup.stop()
    }
}

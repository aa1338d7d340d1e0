import Foundation
import Testing
import TokendProtocol

/// Start-up refuses what it cannot run safely, with one clear message.
@Suite(.serialized)
struct DaemonStartupTests {
    @Test(arguments: [
        ("[daemon]\nsocket = \"s\"\nbogus = 1\n", "daemon.bogus: unknown key"),
        ("[daemon]\nmax_connections = \"many\"\n", "daemon.max_connections: expected an integer"),
        ("[providers.p]\nkind = \"oauth2\"\nclient_id = \"c\"\nclient_auth = \"none\"\n", "providers.p.token_endpoint: is required"),
        (
            "[providers.p]\nkind = \"oauth2\"\ntoken_endpoint = \"http://127.0.0.1/t\"\nclient_id = \"c\"\nclient_secret_file = \"nope\"\n",
            "providers.p.client_secret_file: cannot read"
        ),
        ("[daemon\n", "line 1"),
    ])
    func badConfigurationStopsStartUpNamingFileKeyAndProblem(config: String, expected: String) async throws {
        let directory = try ScratchDirectory()
        try directory.write("bad.toml", config)
        let result = try await runCommand(Repository.binary("tokend"), ["--config", directory.file("bad.toml")])
        #expect(result.status == 78)
        #expect(result.stderr.contains(directory.file("bad.toml")), "\(result.stderr)")
        #expect(result.stderr.contains(expected), "\(result.stderr)")
        #expect(result.stderr.split(separator: "\n").count == 1, "one line: \(result.stderr)")
    }

    /// Like systemd's daemons, `tokend --version` prints the version GetInfo reports and exits 0
    /// without reading a configuration; an unknown option is a usage error naming it.
    @Test func versionAndUsageErrorsAreAnsweredWithoutStarting() async throws {
        let version = try await runCommand(Repository.binary("tokend"), ["--version", "--config", "/nonexistent/tokend.toml"])
        #expect(version.status == 0, "\(version.stderr)")
        #expect(version.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == TokendVersion.string)
        let unknown = try await runCommand(Repository.binary("tokend"), ["--bogus"])
        #expect(unknown.status == 64)
        #expect(unknown.stderr.contains("--bogus"), "\(unknown.stderr)")
    }

    /// Writes `bad.toml` with provider `p` (an https token endpoint, client `c`) and `lines`.
    static func writeProvider(in directory: ScratchDirectory, _ lines: String) throws {
        try directory.write(
            "bad.toml",
            """
            [providers.p]
            kind = "oauth2"
            token_endpoint = "https://127.0.0.1:9/token"
            client_id = "c"
            \(lines)
            """)
    }

    /// A `private_key_jwt` key tokend cannot sign with stops start-up and `--check-config`
    /// with one line naming the key, and never quotes the key.
    @Test(arguments: [
        (["genrsa", "1024"], "holds an RSA key of fewer than 2048 bits"),
        (["ecparam", "-name", "secp384r1", "-genkey", "-noout"], "holds no P-256 or RSA private key"),
    ])
    func anUnusableClientKeyStopsStartUp(generate: [String], expected: String) async throws {
        let directory = try ScratchDirectory()
        let key = try await runCommand("/usr/bin/openssl", generate)
        try #require(key.status == 0, "\(key.stderr)")
        try directory.write("client.key", key.stdout, mode: 0o600)
        try Self.writeProvider(in: directory, #"client_auth = "private_key_jwt"\#nclient_assertion_key_file = "client.key""#)
        for arguments in [["--config", directory.file("bad.toml")], ["--check-config", "--config", directory.file("bad.toml")]] {
            let result = try await runCommand(Repository.binary("tokend"), arguments)
            #expect(result.status == 78, "\(arguments)")
            #expect(
                result.stderr.contains("providers.p.client_assertion_key_file: \(directory.file("client.key")) \(expected)"),
                "\(result.stderr)")
            #expect(result.stderr.split(separator: "\n").count == 1, "one line: \(result.stderr)")
            for line in key.stdout.split(separator: "\n") where !line.hasPrefix("-----") {
                #expect(!result.stderr.contains(line))
            }
        }
    }

    /// A TLS client key that does not belong to its certificate stops start-up, naming both files.
    @Test func aTLSClientKeyOfAnotherCertificateStopsStartUp() async throws {
        let directory = try ScratchDirectory()
        for name in ["a", "b"] {
            let made = try await runCommand(
                "/usr/bin/openssl",
                [
                    "req", "-x509", "-nodes", "-days", "1", "-subj", "/CN=\(name)", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                    "-keyout", directory.file("\(name).key"), "-out", directory.file("\(name).pem"),
                ])
            try #require(made.status == 0, "\(made.stderr)")
        }
        try Self.writeProvider(
            in: directory, #"client_auth = "tls_client_auth"\#ntls_client_certificate_file = "a.pem"\#ntls_client_key_file = "b.key""#)
        let result = try await runCommand(Repository.binary("tokend"), ["--check-config", "--config", directory.file("bad.toml")])
        #expect(result.status == 78)
        #expect(
            result.stderr.contains(
                "providers.p.tls_client_key_file: the key in \(directory.file("b.key")) does not belong to the certificate in \(directory.file("a.pem"))"
            ),
            "\(result.stderr)")
    }

    @Test func aSecondDaemonOnTheSameStateDirectoryRefuses() async throws {
        let first = try DaemonProcess()
        try await first.start()
        // Same state directory, different socket.
        let config = DaemonProcess.configuration().replacingOccurrences(of: "socket = \"tokend.sock\"", with: "socket = \"second.sock\"")
        try first.directory.write("second.toml", config)
        let result = try await runCommand(Repository.binary("tokend"), ["--config", first.directory.file("second.toml")])
        #expect(result.status != 0)
        #expect(result.stderr.contains("already using"), "\(result.stderr)")
        #expect(first.process.isRunning)
        try await first.stop()
    }

    @Test func aKeyFileReadableByOthersIsRefused() async throws {
        let daemon = try DaemonProcess()
        try FileManager.default.createDirectory(atPath: daemon.stateDirectory, withIntermediateDirectories: true)
        try daemon.directory.write("state/tokend.key", "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\n", mode: 0o644)
        await #expect(throws: (any Error).self) { try await daemon.start(timeout: .seconds(10)) }
        #expect(daemon.log.contains("tokend.key"))
        #expect(daemon.log.contains("644"), "\(daemon.log)")
    }

    @Test func theKeyIsGeneratedWithMode0600AndSigtermStopsCleanly() async throws {
        let daemon = try DaemonProcess()
        try await daemon.start()
        let attributes = try FileManager.default.attributesOfItem(atPath: daemon.stateDirectory + "/tokend.key")
        #expect((attributes[.posixPermissions] as? Int) == 0o600)
        let status = try await daemon.stop()
        #expect(status == 0)
        #expect(!FileManager.default.fileExists(atPath: daemon.socketPath), "the socket is removed on stop")
    }
}

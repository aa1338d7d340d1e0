import Foundation
import Testing

/// `tokend --reload` (tokend.service's `ExecReload=`) against the real daemon: it reports the
/// daemon's verdict on the file, so that `systemctl reload` fails when tokend refuses it; and
/// `tokend --check-config --as-user`, which reads the files as the service's user would.
/// (scripts/realhost runs both under a real systemd.)
@Suite(.serialized)
struct ReloadCommandTests {
    static let nobody: UInt32 = 65534

    static func reload(_ daemon: DaemonProcess) async throws -> CommandResult {
        try await runCommand(Repository.binary("tokend"), ["--reload", "--socket", daemon.socketPath], timeout: .seconds(60))
    }

    @Test func reloadReportsTheDaemonsVerdictAndARefusedFileLeavesTheRunningConfiguration() async throws {
        let daemon = try DaemonProcess()
        try await daemon.start()
        let client = try RawClient(path: daemon.socketPath)
        let access = Tokens.random("kept-")
        #expect(try client.call(Tokens.addCall(user: "alice", access: access, refresh: "r")).errorName == nil)

        let second = """

            [providers.second]
            kind = "oauth2"
            token_endpoint = "http://127.0.0.1:9/o/token/"
            client_id = "second"
            client_auth = "none"
            """
        try daemon.directory.write("tokend.toml", DaemonProcess.configuration(providers: DaemonProcess.defaultProviders + second))
        let applied = try await Self.reload(daemon)
        #expect(applied.status == 0, "\(applied)")
        #expect(applied.stdout.contains("configuration reloaded: \(daemon.directory.file("tokend.toml")) (providers: example, second)"))

        // A typing error: refused with status 78, naming the key; the running configuration stays.
        try daemon.directory.write(
            "tokend.toml", DaemonProcess.configuration(providers: DaemonProcess.defaultProviders + second + "\nrefresh_att = 0.8"))
        let refused = try await Self.reload(daemon)
        #expect(refused.status == 78, "\(refused)")
        #expect(refused.stderr.contains("providers.second.refresh_att"), "\(refused.stderr)")
        #expect(daemon.log.contains("reloading the configuration failed"))
        #expect(try client.call(Tokens.tokenCall(user: "alice")).accessToken == access)
        let ofSecond = try client.call(Tokens.addCall(user: "bob", access: Tokens.random("b-"), refresh: "r", provider: "second"))
        #expect(ofSecond.errorName == nil, "provider second is still in force: \(ofSecond)")

        // Administrators only: another uid gets PermissionDenied and nothing is reloaded.
        let asNobody = try await OtherUser.call(
            #"{"method":"io.tokend.TokenProvider.Reload"}"#, socket: daemon.socketPath, uid: Self.nobody, gid: Self.nobody)
        #expect(asNobody.errorName == "io.tokend.TokenProvider.PermissionDenied")
        #expect(try await daemon.stop() == 0)

        // Nothing listening: status 1, saying so.
        let unreachable = try await Self.reload(daemon)
        #expect(unreachable.status == 1 && !unreachable.stderr.isEmpty, "\(unreachable)")
    }

    @Test func checkConfigAsAnotherUserReadsTheFilesAsThatUser() async throws {
        let directory = try ScratchDirectory()
        try directory.write("tokend.toml", DaemonProcess.configuration())
        try directory.write("client-secret", "test-client-secret\n", mode: 0o600)  // root's only
        let tokend = Repository.binary("tokend")
        let asRoot = try await runCommand(tokend, ["--check-config", "--config", directory.file("tokend.toml")])
        #expect(asRoot.status == 0 && asRoot.stdout.hasPrefix("configuration OK"), "\(asRoot)")
        let asNobody = try await runCommand(tokend, ["--check-config", "--as-user", "nobody", "--config", directory.file("tokend.toml")])
        #expect(asNobody.status == 78, "\(asNobody)")
        #expect(asNobody.stderr.contains("client_secret_file") && asNobody.stderr.contains("read as user nobody"), "\(asNobody.stderr)")
        chmod(directory.file("client-secret"), 0o644)
        let readable = try await runCommand(tokend, ["--check-config", "--as-user", "nobody", "--config", directory.file("tokend.toml")])
        #expect(readable.status == 0 && readable.stdout.contains("files read as user nobody"), "\(readable)")
    }

    @Test(arguments: [
        (["--as-user", "nobody"], "--as-user goes with --check-config"),
        (["--socket", "/run/x"], "--socket goes with --reload"),
        (["--check-config", "--reload"], "--check-config and --reload exclude each other"),
        (["help"], "Unexpected argument"),
    ])
    func usageErrorsExit64NamingTheProblem(arguments: [String], message: String) async throws {
        let result = try await runCommand(Repository.binary("tokend"), arguments)
        #expect(result.status == 64, "\(result)")
        #expect(result.stderr.contains(message), "\(result.stderr)")
    }
}

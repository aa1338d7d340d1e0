import Foundation
import Testing
import TokendTestSupport

/// `Tests/interop/bearer_gate.py`: a resource server that accepts a token only while the real
/// IdP says it is active (git over HTTP Basic, or a Kubernetes API stand-in over HTTPS).
final class BearerGate: @unchecked Sendable {
    // @unchecked: owned by one test.
    let port: Int
    let logPath: String
    private let process = Process()

    init(mode: String, idp: IdentityProvider, directory: ScratchDirectory, extra: [String]) throws {
        port = try FreePort.pick()
        logPath = directory.file("gate-\(mode).log")
        FileManager.default.createFile(atPath: logPath, contents: nil)
        process.configurePythonScript(
            "Tests/interop/bearer_gate.py",
            [mode, "--introspect", "http://127.0.0.1:\(idp.port)/o/introspect/", "--port", "\(port)", "--log", logPath] + extra)
    }

    func start() async throws {
        try await process.startListening(on: port, name: "bearer_gate.py")
    }

    /// How many requests it accepted and refused so far.
    var counts: (accepted: Int, refused: Int) {
        let lines = ((try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "").split(separator: "\n")
        return (lines.filter { $0.hasPrefix("accepted") }.count, lines.filter { $0.hasPrefix("refused") }.count)
    }

    func stop() { process.stopStandIn() }

    deinit { process.stopStandIn() }
}

/// git and kubectl from Debian getting tokend's tokens through `tokenctl git-credential` and
/// `tokenctl kube-credential`, against servers that check each token with the real IdP.
@Suite(.serialized)
struct CredentialHelperTests {
    static let tokenctl = Repository.binary("tokenctl")

    /// git with no user or system configuration, never prompting.
    static func git(_ arguments: [String], home: String, directory: String? = nil) async throws -> ChildProcess.Output {
        try await ChildProcess.run(
            "/usr/bin/git", arguments,
            environment: [
                "HOME": home, "GIT_CONFIG_NOSYSTEM": "1", "GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "/bin/false",
                "SSH_ASKPASS": "/bin/false",
            ],
            directory: directory, timeout: .seconds(60))
    }

    @Test func gitClonesAndFetchesWithTheCurrentTokenAcrossARotation() async throws {
        let setup = try await IdPDaemon.start(daemonExtra: "forced_refresh_interval = \"1s\"")
        let client = try RawClient(path: setup.daemon.socketPath)
        let minted = try await setup.addMinted("alice", lifetime: 3600, client: client)
        let home = setup.directory.file("home")
        let repos = setup.directory.file("repos")
        let work = setup.directory.file("work")
        for folder in [home, repos, work] { try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true) }
        // A bare repository with one commit, served by git http-backend behind the gate.
        func commit(_ message: String) async throws {
            try message.write(toFile: work + "/file.txt", atomically: true, encoding: .utf8)
            for step in [
                ["add", "file.txt"], ["-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", message],
                ["push", "-q", repos + "/project.git", "HEAD:main"],
            ] {
                let result = try await Self.git(step, home: home, directory: work)
                try #require(result.status == 0, "git \(step): \(result.stderr)")
            }
        }
        try #require(try await Self.git(["init", "-q", "--bare", "-b", "main", repos + "/project.git"], home: home).status == 0)
        try #require(try await Self.git(["init", "-q", "-b", "main", work], home: home).status == 0)
        try await commit("first")
        let gate = try BearerGate(mode: "git", idp: setup.idp, directory: setup.directory, extra: ["--repos", repos])
        try await gate.start()
        defer { gate.stop() }
        let url = "http://127.0.0.1:\(gate.port)/project.git"
        let helper = "!\(Self.tokenctl) --socket \(setup.daemon.socketPath) git-credential alice"

        // Without the helper git gets nothing: the gate refuses anonymous access.
        let refused = try await Self.git(["clone", "-q", url, setup.directory.file("anonymous")], home: home)
        #expect(refused.status != 0)

        // The helper, configured once in the clone.
        let clone = setup.directory.file("clone")
        let cloned = try await Self.git(["clone", "-q", "--config", "credential.helper=\(helper)", url, clone], home: home)
        #expect(cloned.status == 0, "\(cloned.stderr) \(setup.daemon.log.suffix(2000))")
        let acceptedAfterClone = gate.counts.accepted
        #expect(acceptedAfterClone >= 1)

        // tokend replaces the token; the IdP deletes the old one, which the gate now refuses.
        let rotated = try client.call(Tokens.tokenCall(user: "alice", rejected: minted["access_token"] as? String))
        #expect(rotated.accessToken != nil && rotated.accessToken != minted["access_token"] as? String, "\(rotated)")
        try await commit("second")
        let fetched = try await Self.git(["fetch", "-q", "origin"], home: home, directory: clone)
        #expect(fetched.status == 0, "\(fetched.stderr)")
        let log = try await Self.git(["log", "--format=%s", "origin/main"], home: home, directory: clone)
        #expect(log.stdout.split(separator: "\n").first == "second", "\(log)")
        #expect(gate.counts.accepted > acceptedAfterClone)
        // Nothing of git's configuration changed, and no token was written into it.
        let config = try String(contentsOfFile: clone + "/.git/config", encoding: .utf8)
        #expect(!config.contains(minted["access_token"] as! String) && !config.contains(rotated.accessToken ?? "-"))

        // A user tokend does not know: git gets no credential, tokenctl says why on stderr.
        let unknown = try await Self.git(
            [
                "-c", "credential.helper=", "-c",
                "credential.helper=!\(Self.tokenctl) --socket \(setup.daemon.socketPath) git-credential nobody",
                "fetch", "-q", "origin",
            ], home: home, directory: clone)
        #expect(unknown.status != 0)
        #expect(unknown.stderr.contains("tokend has no credential for user 'nobody'"), "\(unknown.stderr)")
        try await setup.stop()
    }

    @Test func gitsEraseMakesTokendReplaceARefusedToken() async throws {
        let setup = try await IdPDaemon.start(daemonExtra: "forced_refresh_interval = \"1s\"")
        let client = try RawClient(path: setup.daemon.socketPath)
        let minted = try await setup.addMinted("alice", lifetime: 3600, client: client)
        let old = minted["access_token"] as! String
        let get = try await runCommand(
            Self.tokenctl, ["--socket", setup.daemon.socketPath, "git-credential", "alice", "get"],
            stdin: "protocol=https\nhost=git.example.com\n\n")
        #expect(get.status == 0)
        #expect(get.stdout.hasPrefix("username=oauth2\npassword=\(old)\npassword_expiry_utc="), "\(get.stdout)")
        // git reports the refused credential with erase; the next get is a new token.
        let erase = try await runCommand(
            Self.tokenctl, ["--socket", setup.daemon.socketPath, "git-credential", "alice", "erase"],
            stdin: "protocol=https\nhost=git.example.com\nusername=oauth2\npassword=\(old)\n\n")
        #expect(erase.status == 0 && erase.stdout.isEmpty, "\(erase)")
        let again = try await runCommand(
            Self.tokenctl, ["--socket", setup.daemon.socketPath, "git-credential", "alice", "get", "--username", "x-access-token"],
            stdin: "\n")
        #expect(again.stdout.hasPrefix("username=x-access-token\npassword="), "\(again.stdout)")
        #expect(!again.stdout.contains(old))
        // store and operations of later gits are accepted and do nothing.
        for operation in ["store", "capability"] {
            let result = try await runCommand(
                Self.tokenctl, ["--socket", setup.daemon.socketPath, "git-credential", "alice", operation], stdin: "password=x\n\n")
            #expect(result.status == 0 && result.stdout.isEmpty, "\(operation): \(result)")
        }
        try await setup.stop()
    }

    @Test func kubectlGetsItsTokenFromTheExecPlugin() async throws {
        let kubectl = try #require(
            ["/usr/bin/kubectl", "/usr/local/bin/kubectl", "/bin/kubectl"].first { FileManager.default.isExecutableFile(atPath: $0) },
            "kubectl is installed by scripts/setup-host.sh (kubernetes-client)")
        let setup = try await IdPDaemon.start()
        let client = try RawClient(path: setup.daemon.socketPath)
        try await setup.addMinted("alice", lifetime: 3600, client: client)
        let pki = setup.directory.file("pki")
        let made = try await runCommand(IdentityProvider.python, [IdentityProvider.script, "make-ca", "--out", pki])
        try #require(made.status == 0, "\(made.stderr)")
        let gate = try BearerGate(
            mode: "kube", idp: setup.idp, directory: setup.directory,
            extra: ["--tls-cert", pki + "/server.pem", "--tls-key", pki + "/server.key"])
        try await gate.start()
        defer { gate.stop() }
        func kubeconfig(user: String) throws -> String {
            let path = setup.directory.file("kubeconfig-\(user)")
            try """
            apiVersion: v1
            kind: Config
            clusters:
            - name: local
              cluster:
                server: https://127.0.0.1:\(gate.port)
                certificate-authority: \(pki)/ca.pem
            users:
            - name: \(user)
              user:
                exec:
                  apiVersion: client.authentication.k8s.io/v1beta1
                  command: \(Self.tokenctl)
                  args: ["--socket", "\(setup.daemon.socketPath)", "kube-credential", "\(user)"]
            contexts:
            - name: local
              context: {cluster: local, user: \(user)}
            current-context: local

            """.write(toFile: path, atomically: true, encoding: .utf8)
            return path
        }
        let home = setup.directory.file("home")
        try FileManager.default.createDirectory(atPath: home, withIntermediateDirectories: true)
        let ok = try await ChildProcess.run(
            kubectl, ["--kubeconfig", try kubeconfig(user: "alice"), "get", "--raw", "/api"],
            environment: ["HOME": home], timeout: .seconds(60))
        #expect(ok.status == 0, "\(ok.stderr)")
        #expect(ok.stdout.contains("APIVersions"), "\(ok.stdout)")
        #expect(gate.counts.accepted >= 1)
        // An unknown user, and one who must log in again: kubectl fails with tokenctl's reason.
        let failed = try await ChildProcess.run(
            kubectl, ["--kubeconfig", try kubeconfig(user: "nobody"), "get", "--raw", "/api"],
            environment: ["HOME": home], timeout: .seconds(60))
        #expect(failed.status != 0)
        #expect(failed.stderr.contains("tokend has no credential for user 'nobody'"), "\(failed.stderr)")
        let carol = try await setup.addMinted("carol", lifetime: 3600, client: client)
        try await setup.idp.revoke(refreshToken: carol["refresh_token"] as! String)
        #expect(
            try client.call(Tokens.tokenCall(user: "carol", minValid: 7200)).errorName == "io.tokend.TokenProvider.ReauthenticationRequired"
        )
        let ended = try await ChildProcess.run(
            kubectl, ["--kubeconfig", try kubeconfig(user: "carol"), "get", "--raw", "/api"],
            environment: ["HOME": home], timeout: .seconds(60))
        #expect(ended.status != 0)
        #expect(ended.stderr.contains("log in again: tokenctl login carol"), "\(ended.stderr)")
        try await setup.stop()
    }

    @Test func globalOptionsGoBeforeOrAfterTheSubcommandAndUnknownWordsAreUsageErrors() async throws {
        let daemon = try DaemonProcess()
        try await daemon.start()
        let client = try RawClient(path: daemon.socketPath)
        let access = Tokens.random("g-")
        #expect(try client.call(Tokens.addCall(user: "alice", access: access, refresh: nil)).errorName == nil)
        for arguments in [
            ["--socket", daemon.socketPath, "token", "alice"], ["token", "alice", "--socket", daemon.socketPath],
            ["--timeout", "5", "--socket=\(daemon.socketPath)", "token", "--min-valid", "1", "alice"],
        ] {
            let result = try await runCommand(Self.tokenctl, arguments)
            #expect(result.status == 0 && result.stdout == access + "\n", "\(arguments): \(result)")
        }
        let status = try await runCommand(Self.tokenctl, ["--socket", daemon.socketPath, "--json"])
        #expect(status.status == 0 && status.stdout.contains("\"alice\""), "\(status)")
        for (arguments, named) in [
            (["alice"], "'alice' is not a tokenctl command"), (["--socket", daemon.socketPath, "statsu"], "'statsu'"),
            (["--socket"], "--socket needs a value"), (["token", "alice", "--bogus"], "--bogus"),
        ] {
            let result = try await runCommand(Self.tokenctl, arguments)
            #expect(result.status == 2, "\(arguments): \(result)")
            #expect(result.stderr.contains(named), "\(arguments): \(result.stderr)")
            #expect(!result.stderr.contains("no credential for user"))
        }
        try await daemon.stop()
    }
}

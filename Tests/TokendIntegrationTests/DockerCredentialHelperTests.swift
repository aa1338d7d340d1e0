import Foundation
import Testing
import TokendTestSupport

/// Debian's `docker-registry` (distribution 2.8) on 127.0.0.1 with token auth, and its realm,
/// `Tests/interop/registry_realm.py`, which issues the registry's JWT only for an access token
/// the test IdP says is active.
final class TokenAuthRegistry: @unchecked Sendable {
    // @unchecked: owned by one test.
    static let binary = "/usr/bin/docker-registry"
    static let realmScript = "Tests/interop/registry_realm.py"
    let port: Int
    let realmPort: Int
    let realmLog: String
    let registryLog: String
    let image: String
    private let realm = Process()
    private let registry = Process()

    init(idp: IdentityProvider, directory: ScratchDirectory) async throws {
        try #require(
            FileManager.default.isExecutableFile(atPath: Self.binary), "docker-registry is installed by scripts/setup-host.sh")
        port = try FreePort.pick()
        realmPort = try FreePort.pick()
        realmLog = directory.file("realm.log")
        registryLog = directory.file("registry.log")
        image = directory.file("image")
        let pki = directory.file("registry-pki")
        for command in [["make-pki", "--out", pki], ["make-image", "--out", image]] {
            let made = try await runCommand(IdentityProvider.python, [Repository.root + "/" + Self.realmScript] + command)
            try #require(made.status == 0, "\(command[0]): \(made.stderr)")
        }
        FileManager.default.createFile(atPath: realmLog, contents: nil)
        FileManager.default.createFile(atPath: registryLog, contents: nil)
        realm.configurePythonScript(
            Self.realmScript,
            [
                "serve", "--introspect", "http://127.0.0.1:\(idp.port)/o/introspect/", "--key", pki + "/realm.key", "--issuer",
                "tokend-test-realm", "--service", "tokend-test-registry", "--port", "\(realmPort)", "--log", realmLog,
            ])
        try directory.write(
            "registry.yml",
            """
            version: 0.1
            log:
              level: warn
            storage:
              filesystem:
                rootdirectory: \(directory.file("registry-data"))
            http:
              addr: 127.0.0.1:\(port)
            auth:
              token:
                realm: http://127.0.0.1:\(realmPort)/token
                service: tokend-test-registry
                issuer: tokend-test-realm
                rootcertbundle: \(pki)/realm.pem

            """)
        registry.executableURL = URL(fileURLWithPath: Self.binary)
        registry.arguments = ["serve", directory.file("registry.yml")]
        let log = try FileHandle(forWritingTo: URL(fileURLWithPath: registryLog))
        registry.standardOutput = log
        registry.standardError = log
    }

    func start() async throws {
        try await realm.startListening(on: realmPort, name: "registry_realm.py")
        try await registry.startListening(on: port, name: "docker-registry")
    }

    /// The realm's log lines: `issued FINGERPRINT SCOPE` and `refused FINGERPRINT`.
    var realmLines: [String] {
        ((try? String(contentsOfFile: realmLog, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
    }

    func stop() {
        for process in [realm, registry] { process.stopStandIn() }
    }

    deinit { stop() }
}

/// The first 16 hex digits of a token's SHA-256, as the test servers log it (the token goes to
/// sha256sum on stdin, never in argv).
func tokenFingerprint(_ token: String) async throws -> String {
    let result = try await runCommand("/usr/bin/sha256sum", [], stdin: token)
    return String(result.stdout.prefix(16))
}

/// Debian's skopeo getting tokend's tokens through `docker-credential-tokend` (a link to
/// tokenctl), from a registry that checks each token with the real IdP.
@Suite(.serialized)
struct DockerCredentialHelperTests {
    static let tokenctl = Repository.binary("tokenctl")

    /// A directory with `docker-credential-tokend` linked to tokenctl, the mapping file under
    /// `config/tokend/docker-credentials`, and an auth file naming the helper for `registry`.
    struct HelperSetup {
        let bin: String
        let config: String
        let authFile: String
        let environment: [String: String]

        init(directory: ScratchDirectory, socket: String, registry: String, mapping: String) throws {
            bin = directory.file("bin")
            config = directory.file("config")
            authFile = directory.file("auth.json")
            try FileManager.default.createDirectory(atPath: bin, withIntermediateDirectories: true)
            try FileManager.default.createDirectory(atPath: config + "/tokend", withIntermediateDirectories: true)
            try FileManager.default.createSymbolicLink(atPath: bin + "/docker-credential-tokend", withDestinationPath: tokenctl)
            try mapping.write(toFile: config + "/tokend/docker-credentials", atomically: true, encoding: .utf8)
            try #"{"credHelpers": {"\#(registry)": "tokend"}}"#.write(toFile: authFile, atomically: true, encoding: .utf8)
            let home = directory.file("home")
            try FileManager.default.createDirectory(atPath: home, withIntermediateDirectories: true)
            environment = [
                "PATH": bin + ":/usr/bin:/bin", "XDG_CONFIG_HOME": config, "TOKEND_SOCKET": socket, "HOME": home,
                "XDG_RUNTIME_DIR": home, "REGISTRY_AUTH_FILE": authFile,
            ]
        }

        func helper(_ operation: String, stdin: String) async throws -> ChildProcess.Output {
            try await ChildProcess.run(
                bin + "/docker-credential-tokend", [operation], stdin: stdin, environment: environment, timeout: .seconds(30))
        }
    }

    static func skopeo(_ arguments: [String], _ setup: HelperSetup) async throws -> ChildProcess.Output {
        try #require(FileManager.default.isExecutableFile(atPath: "/usr/bin/skopeo"), "skopeo is installed by scripts/setup-host.sh")
        return try await ChildProcess.run("/usr/bin/skopeo", arguments, environment: setup.environment, timeout: .seconds(120))
    }

    @Test func skopeoPushesAndListsTagsWithTheCurrentTokenFollowsARotationAndFailsOnceRevoked() async throws {
        let setup = try await IdPDaemon.start()
        let client = try RawClient(path: setup.daemon.socketPath)
        let minted = try await setup.addMinted("alice", lifetime: 3600, client: client)
        let registry = try await TokenAuthRegistry(idp: setup.idp, directory: setup.directory)
        try await registry.start()
        defer { registry.stop() }
        let host = "127.0.0.1:\(registry.port)"
        let helper = try HelperSetup(
            directory: setup.directory, socket: setup.daemon.socketPath, registry: host, mapping: "# registry  user\n\(host)  alice\n")
        let repository = "docker://\(host)/tokend/hello"
        func push(_ tag: String) async throws -> ChildProcess.Output {
            try await Self.skopeo(
                [
                    "copy", "--dest-tls-verify=false", "--dest-authfile", helper.authFile, "oci:\(registry.image):latest",
                    "\(repository):\(tag)",
                ],
                helper)
        }
        func listTags() async throws -> ChildProcess.Output {
            try await Self.skopeo(["list-tags", "--tls-verify=false", "--authfile", helper.authFile, repository], helper)
        }

        // A fresh token: the push and the listing go through, with the token tokend holds.
        let first = try await tokenFingerprint(minted["access_token"] as! String)
        let pushed = try await push("v1")
        #expect(pushed.status == 0, "\(pushed.stderr)\n\(registry.realmLines)")
        let listed = try await listTags()
        #expect(listed.status == 0 && listed.stdout.contains("\"v1\""), "\(listed)")
        let issuedFirst = registry.realmLines.filter { $0.hasPrefix("issued \(first) ") }
        #expect(issuedFirst.contains { $0.contains("push") } && issuedFirst.count >= 2, "\(registry.realmLines)")

        // tokend replaces the token (the IdP deletes the old one): the next runs send the new one.
        let rotated = try client.call(Tokens.tokenCall(user: "alice", rejected: minted["access_token"] as? String))
        let newToken = try #require(rotated.accessToken)
        #expect(newToken != minted["access_token"] as? String)
        let second = try await tokenFingerprint(newToken)
        let linesBefore = registry.realmLines.count
        let pushedAgain = try await push("v2")
        #expect(pushedAgain.status == 0, "\(pushedAgain.stderr)")
        let listedAgain = try await listTags()
        #expect(listedAgain.status == 0 && listedAgain.stdout.contains("\"v2\""), "\(listedAgain)")
        let afterRotation = registry.realmLines.dropFirst(linesBefore)
        #expect(!afterRotation.isEmpty && afterRotation.allSatisfy { $0.hasPrefix("issued \(second) ") }, "\(afterRotation)")

        // The login is revoked at the IdP: the token tokend still holds is refused, and so is
        // every push and listing.
        for refreshToken in try await setup.idp.refreshTokens(client: IdentityProvider.clientID) {
            try? await setup.idp.revoke(refreshToken: refreshToken)
        }
        let linesBeforeRevocation = registry.realmLines.count
        let refusedPush = try await push("v3")
        #expect(refusedPush.status != 0)
        let refusedList = try await listTags()
        #expect(refusedList.status != 0)
        #expect(refusedList.stderr.contains("unauthorized"), "\(refusedList.stderr)")
        let afterRevocation = registry.realmLines.dropFirst(linesBeforeRevocation)
        #expect(!afterRevocation.isEmpty && afterRevocation.allSatisfy { $0 == "refused \(second)" }, "\(afterRevocation)")
        // No token in the auth file skopeo was given.
        let authFile = try String(contentsOfFile: helper.authFile, encoding: .utf8)
        #expect(!authFile.contains(newToken) && !authFile.contains(minted["access_token"] as! String))
        try await setup.stop()
    }

    @Test func theHelperSpeaksDockersProtocolThroughItsLink() async throws {
        let setup = try await IdPDaemon.start()
        let client = try RawClient(path: setup.daemon.socketPath)
        let minted = try await setup.addMinted("alice", lifetime: 3600, client: client)
        let old = minted["access_token"] as! String
        let helper = try HelperSetup(
            directory: setup.directory, socket: setup.daemon.socketPath, registry: "registry.example.com",
            mapping: "registry.example.com alice\n\nlocalhost:5000\talice\tbot\n# a comment\nother.example.com nobody\n")

        let get = try await helper.helper("get", stdin: "https://registry.example.com/v2/\n")
        #expect(get.status == 0, "\(get.stderr)")
        let answer = try RawClient.object(get.stdout)
        #expect(answer["ServerURL"] as? String == "https://registry.example.com/v2/")
        #expect(answer["Username"] as? String == "oauth2")
        #expect(answer["Secret"] as? String == old)
        let named = try RawClient.object(try await helper.helper("get", stdin: "localhost:5000").stdout)
        #expect(named["Username"] as? String == "bot" && named["Secret"] as? String == old)

        // erase: the registry refused the token; the next get is a new one.
        let erase = try await helper.helper("erase", stdin: "registry.example.com")
        #expect(erase.status == 0 && erase.stdout.isEmpty, "\(erase)")
        let again = try RawClient.object(try await helper.helper("get", stdin: "registry.example.com").stdout)
        let fresh = try #require(again["Secret"] as? String)
        #expect(fresh != old)
        #expect(try await setup.idp.tokenInfo(accessToken: old)["active"] as? Bool == false)

        // store is accepted and ignored; list shows the registries whose credential this
        // caller gets (not other.example.com: tokend has no "nobody").
        let store = try await helper.helper("store", stdin: #"{"ServerURL":"registry.example.com","Username":"u","Secret":"s"}"#)
        #expect(store.status == 0 && store.stdout.isEmpty, "\(store)")
        let list = try await helper.helper("list", stdin: "")
        #expect(list.status == 0, "\(list.stderr)")
        let listed = try RawClient.object(list.stdout)
        #expect(listed.count == 2 && listed["registry.example.com"] as? String == "oauth2" && listed["localhost:5000"] as? String == "bot")

        // A registry not in the file: Docker's "not found", so the tool goes on anonymously.
        let unmapped = try await helper.helper("get", stdin: "quay.io")
        #expect(unmapped.status == 1 && unmapped.stdout == "credentials not found in native keychain\n", "\(unmapped)")
        // A mapped user tokend does not know: no answer, the reason on stderr.
        let unknown = try await helper.helper("get", stdin: "other.example.com")
        #expect(unknown.status == 4 && unknown.stdout.isEmpty, "\(unknown)")
        #expect(unknown.stderr.contains("tokend has no credential for user 'nobody'"), "\(unknown.stderr)")
        // The same through `tokenctl docker-credential`, and usage errors.
        let direct = try await ChildProcess.run(
            Self.tokenctl, ["docker-credential", "get"], stdin: "registry.example.com", environment: helper.environment,
            timeout: .seconds(30))
        #expect(try RawClient.object(direct.stdout)["Secret"] as? String == fresh)
        let bogus = try await helper.helper("bogus", stdin: "")
        #expect(bogus.status == 2 && bogus.stderr.contains("'bogus' is not an operation"), "\(bogus)")
        try "registry.example.com\n".write(toFile: helper.config + "/tokend/docker-credentials", atomically: true, encoding: .utf8)
        let broken = try await helper.helper("get", stdin: "registry.example.com")
        #expect(broken.status == 2 && broken.stderr.contains("docker-credentials: line 1: expected REGISTRY USER [USERNAME]"), "\(broken)")

        // A login that has ended: the reason and what to do.
        for refreshToken in try await setup.idp.refreshTokens(client: IdentityProvider.clientID) {
            try? await setup.idp.revoke(refreshToken: refreshToken)
        }
        try "registry.example.com alice\n".write(toFile: helper.config + "/tokend/docker-credentials", atomically: true, encoding: .utf8)
        _ = try client.call(Tokens.tokenCall(user: "alice", minValid: 7200))
        let ended = try await helper.helper("get", stdin: "registry.example.com")
        #expect(ended.status == 6 && ended.stderr.contains("log in again: tokenctl login alice"), "\(ended)")
        try await setup.stop()
    }
}

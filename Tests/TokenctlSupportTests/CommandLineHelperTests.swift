import Testing
import TokenctlSupport
import TokendClient
import TokendJSON
import TokendProtocol

/// `tokenctl --socket P token alice`: global options before the subcommand.
struct GlobalArgumentsTests {
    let subcommands: Set<String> = ["status", "token", "git-credential", "store"]

    private func normalize(_ arguments: [String]) throws(GlobalArguments.UsageError) -> [String] {
        try GlobalArguments.normalize(
            arguments, subcommands: subcommands, optionsWithValue: ["--socket", "--timeout"], flags: ["--json"],
            defaultSubcommand: "status",
            groups: ["store": ["adopt"]]
        )
    }

    @Test(arguments: [
        (["--socket", "/s", "token", "alice"], ["token", "--socket", "/s", "alice"]),
        (
            ["--socket=/s", "--timeout", "3", "token", "alice", "--min-valid", "5"],
            ["token", "--socket=/s", "--timeout", "3", "alice", "--min-valid", "5"]
        ),
        (["token", "alice", "--socket", "/s"], ["token", "alice", "--socket", "/s"]),
        (["--json", "status"], ["status", "--json"]),
        (["--socket", "/s"], ["status", "--socket", "/s"]),
        (["--json"], ["status", "--json"]),
        ([], []),
        (["--help"], ["--help"]),
        (["--socket", "/s", "--version"], ["--socket", "/s", "--version"]),
        (["--socket", "/s", "help", "token"], ["help", "--socket", "/s", "token"]),
        (["--socket", "-", "token", "alice"], ["token", "--socket", "-", "alice"]),
        // A group of subcommands: the options go behind the subcommand of the group.
        (["--socket", "/s", "store", "adopt", "--dry-run"], ["store", "adopt", "--socket", "/s", "--dry-run"]),
        (["store", "--socket", "/s", "adopt"], ["store", "adopt", "--socket", "/s"]),
        (["--timeout", "3", "store", "--socket=/s", "adopt"], ["store", "adopt", "--timeout", "3", "--socket=/s"]),
        (["store", "adopt", "--socket", "/s"], ["store", "adopt", "--socket", "/s"]),
        (["--socket", "/s", "store"], ["store", "--socket", "/s"]),
        (["--socket", "/s", "store", "--help"], ["store", "--socket", "/s", "--help"]),
    ])
    func globalOptionsMoveBehindTheSubcommand(arguments: [String], expected: [String]) throws {
        #expect(try normalize(arguments) == expected)
    }

    @Test func aWordThatIsNoSubcommandIsAUsageErrorNamingIt() {
        #expect(throws: GlobalArguments.UsageError(description: "'alice' is not a tokenctl command (see 'tokenctl --help')")) {
            try normalize(["alice"])
        }
        #expect(throws: GlobalArguments.UsageError(description: "'statsu' is not a tokenctl command (see 'tokenctl --help')")) {
            try normalize(["--socket", "/s", "statsu", "alice"])
        }
    }

    @Test func aWordThatIsNoSubcommandOfAGroupIsAUsageErrorNamingIt() {
        #expect(
            throws: GlobalArguments.UsageError(description: "'adpot' is not a 'tokenctl store' command (see 'tokenctl store --help')")
        ) {
            try normalize(["--socket", "/s", "store", "adpot"])
        }
    }

    @Test func aGlobalOptionWithoutItsValueIsAUsageError() {
        #expect(throws: GlobalArguments.UsageError(description: "--socket needs a value")) { try normalize(["--socket"]) }
        #expect(throws: GlobalArguments.UsageError.self) { try normalize(["--", "token"]) }
    }
}

struct GitCredentialHelperTests {
    let credentials = Credentials(userIdentifier: "alice", accessToken: "tok-123", tokenType: "Bearer", expiresAt: 1_700_000_600)

    @Test func attributesAreReadUntilTheBlankLine() {
        let input = Array(
            "protocol=https\nhost=git.example.com\nusername=bob\nwwwauth[]=Bearer realm=x\nnoequals\r\npath=a=b\n\nhost=ignored\n".utf8)
        let attributes = GitCredentialHelper.attributes(input)
        #expect(attributes["protocol"] == "https")
        #expect(attributes["host"] == "git.example.com")
        #expect(attributes["username"] == "bob")
        #expect(attributes["path"] == "a=b")
        #expect(attributes["wwwauth[]"] == "Bearer realm=x")
        #expect(attributes.count == 5)
        #expect(GitCredentialHelper.attributes([UInt8]()).isEmpty)
    }

    @Test func theAnswerCarriesTheTokenAndItsExpiry() {
        #expect(
            GitCredentialHelper.answer(username: "oauth2", credentials: credentials)
                == "username=oauth2\npassword=tok-123\npassword_expiry_utc=1700000600\n")
    }

    @Test func theUsernameComesFromTheOptionThenGitThenTheDefault() {
        #expect(GitCredentialHelper.username(option: "x-access-token", attributes: ["username": "bob"]) == "x-access-token")
        #expect(GitCredentialHelper.username(option: nil, attributes: ["username": "bob"]) == "bob")
        #expect(GitCredentialHelper.username(option: nil, attributes: [:]) == "oauth2")
        #expect(GitCredentialHelper.username(option: "a\nb", attributes: ["username": "c\rd"]) == "oauth2")
    }

    @Test func operations() {
        #expect(GitCredentialHelper.Operation("get") == .get)
        #expect(GitCredentialHelper.Operation("store") == .store)
        #expect(GitCredentialHelper.Operation("erase") == .erase)
        #expect(GitCredentialHelper.Operation("capability") == .other("capability"))
    }
}

struct KubernetesExecCredentialTests {
    let credentials = Credentials(userIdentifier: "alice", accessToken: "tok-123", tokenType: "Bearer", expiresAt: 1_700_000_600)

    @Test func theVersionComesFromKubectlsExecInfoFirst() throws {
        let info = #"{"kind":"ExecCredential","apiVersion":"client.authentication.k8s.io/v1","spec":{"interactive":false}}"#
        #expect(
            try KubernetesExecCredential.apiVersion(execInfo: info, requested: KubernetesExecCredential.v1beta1)
                == KubernetesExecCredential.v1)
        #expect(
            try KubernetesExecCredential.apiVersion(execInfo: nil, requested: KubernetesExecCredential.v1) == KubernetesExecCredential.v1)
        #expect(try KubernetesExecCredential.apiVersion(execInfo: "", requested: nil) == KubernetesExecCredential.v1beta1)
    }

    @Test func unknownVersionsAndBrokenExecInfoAreRefused() {
        #expect(throws: KubernetesExecCredential.Problem.self) {
            try KubernetesExecCredential.apiVersion(execInfo: #"{"apiVersion":"client.authentication.k8s.io/v1alpha1"}"#, requested: nil)
        }
        #expect(throws: KubernetesExecCredential.Problem.self) { try KubernetesExecCredential.apiVersion(execInfo: "{", requested: nil) }
        #expect(throws: KubernetesExecCredential.Problem.self) { try KubernetesExecCredential.apiVersion(execInfo: nil, requested: "v2") }
    }

    @Test func theCredentialHasTheTokenAndAnRFC3339Expiry() throws {
        let text = KubernetesExecCredential.render(apiVersion: KubernetesExecCredential.v1, credentials: credentials)
        guard case .object(let object) = try JSONParser.parse(Array(text.utf8)), case .object(let status)? = object["status"] else {
            Issue.record("not an object: \(text)")
            return
        }
        #expect(object["apiVersion"]?.stringValue == KubernetesExecCredential.v1)
        #expect(object["kind"]?.stringValue == "ExecCredential")
        #expect(status["token"]?.stringValue == "tok-123")
        #expect(status["expirationTimestamp"]?.stringValue == "2023-11-14T22:23:20Z")
    }
}

/// The command lines tokenctl answers without the full parser, and the ones it leaves to it.
struct OneShotCommandLineTests {
    private func common(_ user: String, socket: String? = nil, timeout: Int = 10, minValid: Int) -> OneShotCommandLine.Common {
        OneShotCommandLine.Common(user: user, socket: socket, timeoutSeconds: timeout, minValidSeconds: minValid)
    }

    @Test func plainCommandLinesAreRecognised() {
        #expect(OneShotCommandLine.parse(["token", "alice"]) == .token(common("alice", minValid: 0)))
        #expect(
            OneShotCommandLine.parse(["--socket", "/s", "token", "alice", "--min-valid", "30"])
                == .token(common("alice", socket: "/s", minValid: 30)))
        #expect(
            OneShotCommandLine.parse(["token", "--timeout=5", "alice", "--socket=/s"])
                == .token(common("alice", socket: "/s", timeout: 5, minValid: 0)))
        #expect(
            OneShotCommandLine.parse(["--socket", "/s", "git-credential", "alice", "get"])
                == .gitCredential(common("alice", socket: "/s", minValid: 60), operation: "get", username: nil))
        #expect(
            OneShotCommandLine.parse(["git-credential", "--username", "x", "alice", "erase"])
                == .gitCredential(common("alice", minValid: 60), operation: "erase", username: "x"))
        #expect(
            OneShotCommandLine.parse(["kube-credential", "alice", "--api-version", "client.authentication.k8s.io/v1"])
                == .kubeCredential(common("alice", minValid: 60), apiVersion: "client.authentication.k8s.io/v1"))
    }

    /// Everything else goes to the full parser, which prints its usual help and errors.
    @Test(arguments: [
        [], ["status"], ["token"], ["token", "alice", "bob"], ["token", "alice", "--help"], ["token", "-h", "alice"],
        ["token", "alice", "--rejected-token-stdin"], ["token", "alice", "--min-valid", "-1"], ["token", "alice", "--min-valid", "soon"],
        ["token", "alice", "--timeout", "0"], ["token", "alice", "--timeout", "9999"], ["token", "alice", "--socket", ""],
        ["token", "alice", "--socket"], ["--min-valid", "5", "token", "alice"], ["token", "bad/name"],
        ["token", "alice", "--username", "x"],
        ["git-credential", "alice"], ["git-credential", "alice", "get", "more"], ["kube-credential"], ["alice"], ["--version"],
        ["token", "alice", "--socket", "/a", "--socket", "/b"], ["--json", "token", "alice"],
    ])
    func anythingElseIsLeftToTheFullParser(arguments: [String]) {
        #expect(OneShotCommandLine.parse(arguments) == nil)
    }
}

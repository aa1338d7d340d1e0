import Testing
import TokenctlSupport
import TokendClient

struct DockerCredentialProtocolTests {
    let credentials = Credentials(userIdentifier: "alice", accessToken: "tok-123", tokenType: "Bearer", expiresAt: 1_700_000_600)

    @Test(arguments: [
        ("registry.example.com", "registry.example.com"), ("https://Registry.Example.com/v2/", "registry.example.com"),
        ("http://127.0.0.1:5000", "127.0.0.1:5000"), (" localhost:5000\n", "localhost:5000"),
        ("https://index.docker.io/v1/", "docker.io"), ("registry-1.docker.io", "docker.io"), ("docker.io", "docker.io"),
        ("", ""),
    ])
    func serverURLsNameTheirRegistry(serverURL: String, registry: String) {
        #expect(DockerCredentialHelper.registry(serverURL: serverURL) == registry)
    }

    @Test func theMappingHasOneRegistryPerLine() throws {
        let entries = try DockerCredentialHelper.mapping(
            "# registry user [username]\n\nregistry.example.com alice\r\nhttps://index.docker.io/v1/\tbob\tbuilder\n  # indented comment\n")
        #expect(
            entries == [
                .init(registry: "registry.example.com", user: "alice"), .init(registry: "docker.io", user: "bob", username: "builder"),
            ])
        #expect(DockerCredentialHelper.entry(for: "https://registry.example.com/v2/", in: entries)?.user == "alice")
        #expect(DockerCredentialHelper.entry(for: "quay.io", in: entries) == nil)
        #expect(try DockerCredentialHelper.mapping("").isEmpty)
    }

    @Test(arguments: [
        ("registry.example.com\n", "line 1: expected REGISTRY USER [USERNAME]"),
        ("a alice\nb alice x y\n", "line 2: expected REGISTRY USER [USERNAME]"),
        ("a al/ice\n", "line 1: 'al/ice' is not a user identifier"),
        ("a alice <token>\n", "line 1: the username <token> means an identity token to Docker; use another"),
        ("docker.io alice\nhttps://index.docker.io/v1/ bob\n", "line 2: docker.io is named twice"),
        ("https:// alice\n", "line 1: the registry is empty"),
    ])
    func badMappingLinesAreNamed(text: String, message: String) {
        #expect(throws: DockerCredentialHelper.MappingError(description: message)) { try DockerCredentialHelper.mapping(text) }
    }

    @Test func theMappingFileIsTheUsersOwn() {
        #expect(DockerCredentialHelper.mappingPath { ["XDG_CONFIG_HOME": "/c", "HOME": "/h"][$0] } == "/c/tokend/docker-credentials")
        #expect(
            DockerCredentialHelper.mappingPath { ["XDG_CONFIG_HOME": "relative", "HOME": "/h"][$0] }
                == "/h/.config/tokend/docker-credentials")
        #expect(DockerCredentialHelper.mappingPath { _ in nil } == nil)
    }

    @Test func answersAreDockersJSON() {
        let entry = DockerCredentialHelper.Entry(registry: "registry.example.com", user: "alice")
        #expect(
            DockerCredentialHelper.answer(serverURL: "https://registry.example.com\n", entry: entry, credentials: credentials)
                == #"{"ServerURL":"https://registry.example.com","Username":"oauth2","Secret":"tok-123"}"#)
        #expect(
            DockerCredentialHelper.list([entry, .init(registry: "docker.io", user: "bob", username: "b")])
                == #"{"registry.example.com":"oauth2","docker.io":"b"}"#)
        #expect(DockerCredentialHelper.list([]) == "{}")
    }

    @Test func operations() {
        #expect(DockerCredentialHelper.Operation("get") == .get)
        #expect(DockerCredentialHelper.Operation("list") == .list)
        #expect(DockerCredentialHelper.Operation("version") == .other("version"))
    }
}

struct GoogleExecutableResponseTests {
    @Test func successCarriesTheTokenTypeTokenAndExpiry() {
        let credentials = Credentials(userIdentifier: "alice", accessToken: "tok-123", tokenType: "Bearer", expiresAt: 1_700_000_600)
        #expect(
            GoogleExecutableResponse.success(credentials, tokenType: .jwt)
                == #"{"version":1,"success":true,"token_type":"urn:ietf:params:oauth:token-type:jwt","id_token":"tok-123","expiration_time":1700000600}"#
        )
        #expect(GoogleExecutableResponse.TokenType.idToken.urn == "urn:ietf:params:oauth:token-type:id_token")
    }

    @Test func failureCarriesACodeAndAMessage() {
        #expect(
            GoogleExecutableResponse.failure(code: "unknownUser", message: "no \"alice\"")
                == #"{"version":1,"success":false,"code":"unknownUser","message":"no \"alice\""}"#)
    }
}

struct ConsumerCommandLineTests {
    private func common(_ user: String, minValid: Int = 60) -> OneShotCommandLine.Common {
        OneShotCommandLine.Common(user: user, socket: nil, timeoutSeconds: 10, minValidSeconds: minValid)
    }

    @Test func theLinkIsReadAsTheSubcommand() {
        #expect(OneShotCommandLine.arguments(programName: "/usr/bin/docker-credential-tokend", ["get"]) == ["docker-credential", "get"])
        #expect(OneShotCommandLine.arguments(programName: "docker-credential-tokend", []) == ["docker-credential"])
        #expect(OneShotCommandLine.arguments(programName: "/usr/bin/tokenctl", ["get"]) == ["get"])
        #expect(OneShotCommandLine.arguments(programName: "/x/docker-credential-tokend/tokenctl", ["get"]) == ["get"])
    }

    @Test func consumerHelpersTakeTheFastPath() {
        #expect(OneShotCommandLine.parse(["docker-credential", "get"]) == .dockerCredential(common(""), operation: "get"))
        #expect(
            OneShotCommandLine.parse(["docker-credential", "--min-valid", "5", "list"])
                == .dockerCredential(common("", minValid: 5), operation: "list"))
        #expect(OneShotCommandLine.parse(["google-credential", "alice"]) == .googleCredential(common("alice"), tokenType: .jwt))
        #expect(
            OneShotCommandLine.parse(["google-credential", "alice", "--token-type", "id_token"])
                == .googleCredential(common("alice"), tokenType: .idToken))
    }

    @Test(arguments: [
        ["docker-credential"], ["docker-credential", "alice", "get"], ["docker-credential", "get", "--username", "x"],
        ["google-credential"], ["google-credential", "alice", "--token-type", "saml2"], ["google-credential", "a/b"],
        ["google-credential", "alice", "extra"],
    ])
    func otherCommandLinesGoToTheFullParser(arguments: [String]) {
        #expect(OneShotCommandLine.parse(arguments) == nil)
    }
}

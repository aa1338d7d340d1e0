import Testing
import TokendCore

@testable import TokendConfig

let configFile = "/srv/tokend/etc/tokend.toml"
let baseDirectory = "/srv/tokend/etc"

let exampleConfig = """
    [daemon]
    socket = "../run/tokend.sock"
    state_directory = "../var"
    key_file = "../var/tokend.key"
    admin_groups = ["tokend-admin"]
    max_connections = 1024
    max_message_bytes = 65536

    [providers.example]
    kind = "oauth2"
    token_endpoint = "http://127.0.0.1:8765/o/token/"
    client_id = "tokend-example"
    client_secret_file = "example-client-secret"
    client_auth = "client_secret_basic"
    scope = "read"
    max_token_age = "30d"

    """

struct SecretFileMissing: Error, CustomStringConvertible {
    var path: String
    var description: String { "no such file: \(path)" }
}

/// Parses TOML text with secrets from a dictionary keyed by absolute path.
func parseConfig(_ text: String, secrets: [String: String] = ["/srv/tokend/etc/example-client-secret": "s3cret\n"])
    throws(ConfigurationError) -> DaemonConfiguration
{
    let document = try TOMLDocument.parse(text, file: configFile)
    let parser = ConfigurationParser(file: configFile, baseDirectory: baseDirectory) { path in
        guard let secret = secrets[path] else { throw SecretFileMissing(path: path) }
        return secret
    }
    return try parser.parse(document)
}

func configError(_ text: String, secrets: [String: String] = ["/srv/tokend/etc/example-client-secret": "s3cret\n"]) -> ConfigurationError? {
    do {
        _ = try parseConfig(text, secrets: secrets)
        return nil
    } catch {
        return error
    }
}

/// A valid configuration with `extra` lines appended to the section they follow.
func config(daemon: String = "", provider: String = "", top: String = "") -> String {
    """
    \(top)
    [daemon]
    socket = "/run/tokend/io.tokend"
    \(daemon)

    [providers.example]
    kind = "oauth2"
    token_endpoint = "https://idp.example/token"
    client_id = "tokend"
    client_secret_file = "example-client-secret"
    \(provider)

    """
}

struct ExampleConfigurationTests {
    @Test func parsesEveryValue() throws {
        let configuration = try parseConfig(exampleConfig)
        #expect(configuration.sourceFile == configFile)
        #expect(configuration.socketPath == "/srv/tokend/run/tokend.sock")
        #expect(configuration.stateDirectory == "/srv/tokend/var")
        #expect(configuration.keyFile == "/srv/tokend/var/tokend.key")
        #expect(configuration.adminGroups == ["tokend-admin"])
        #expect(configuration.maxConnections == 1024)
        #expect(configuration.maxMessageBytes == 65536)
        // Defaults for what the example leaves out.
        #expect(configuration.socketMode == 0o666)
        #expect(configuration.allowSelfEnrolment)
        #expect(configuration.maxPipelinedCalls == 128)
        #expect(configuration.callTimeout == .seconds(30))
        #expect(configuration.logLevel == "info")

        #expect(configuration.providers.keys.sorted() == ["example"])
        let provider = try #require(configuration.providers["example"])
        #expect(provider.name == "example")
        guard case .oauth2(let settings) = provider.kind else {
            Issue.record("not oauth2")
            return
        }
        #expect(settings.tokenEndpoint == "http://127.0.0.1:8765/o/token/")
        #expect(settings.issuer == nil)
        #expect(settings.revocationEndpoint == nil)
        #expect(settings.clientID == "tokend-example")
        #expect(settings.clientSecret?.value == "s3cret")  // trailing newline trimmed
        #expect(settings.clientAuthentication == .clientSecretBasic)
        #expect(settings.scope == "read")
        #expect(settings.caFile == nil)
        #expect(provider.refreshPolicy == RefreshPolicy(maxTokenAge: .seconds(30 * 86400)))
    }

    @Test func wholeConfigurationEqualsTheExpectedValue() throws {
        let expected = DaemonConfiguration(
            sourceFile: configFile, socketPath: "/srv/tokend/run/tokend.sock", stateDirectory: "/srv/tokend/var",
            keyFile: "/srv/tokend/var/tokend.key", adminGroups: ["tokend-admin"], maxConnections: 1024, maxMessageBytes: 65536,
            providers: [
                "example": ProviderConfiguration(
                    name: "example",
                    kind: .oauth2(
                        OAuth2Settings(
                            tokenEndpoint: "http://127.0.0.1:8765/o/token/", clientID: "tokend-example",
                            clientSecret: SecretString("s3cret"), clientAuthentication: .clientSecretBasic, scope: "read")),
                    refreshPolicy: RefreshPolicy(maxTokenAge: .seconds(30 * 86400))
                )
            ]
        )
        #expect(try parseConfig(exampleConfig) == expected)
    }

    @Test func secretIsReadFromThePathResolvedAgainstTheBaseDirectory() throws {
        var requested: [String] = []
        let parser = ConfigurationParser(file: configFile, baseDirectory: baseDirectory) { path in
            requested.append(path)
            return "x"
        }
        _ = try parser.parse(TOMLDocument.parse(exampleConfig, file: configFile))
        #expect(requested == ["/srv/tokend/etc/example-client-secret"])
    }

    @Test func emptyConfigurationGivesDefaults() throws {
        let configuration = try parseConfig("")
        #expect(configuration == DaemonConfiguration(sourceFile: configFile))
        #expect(configuration.socketPath == "/run/tokend/io.tokend")
        #expect(configuration.keyFile == "/var/lib/tokend/tokend.key")
        #expect(configuration.providers.isEmpty)
    }

    @Test func keyFileFollowsStateDirectoryUnlessSet() throws {
        let configuration = try parseConfig("[daemon]\nstate_directory = \"/var/lib/other\"\n")
        #expect(configuration.keyFile == "/var/lib/other/tokend.key")
    }

    @Test func everyDaemonSetting() throws {
        let configuration = try parseConfig(
            """
            [daemon]
            socket = "./sock/../io.tokend"
            socket_mode = "0660"
            state_directory = "/var/lib//tokend/"
            admin_groups = []
            allow_self_enrolment = false
            max_connections = 1
            max_message_bytes = 1024
            max_pipelined_calls = 100000
            call_timeout = "1m30s"
            log_level = "debug"
            """)
        #expect(configuration.socketPath == "/srv/tokend/etc/io.tokend")
        #expect(configuration.socketMode == 0o660)
        #expect(configuration.stateDirectory == "/var/lib/tokend")
        #expect(configuration.keyFile == "/var/lib/tokend/tokend.key")
        #expect(configuration.adminGroups.isEmpty)
        #expect(!configuration.allowSelfEnrolment)
        #expect(configuration.maxConnections == 1)
        #expect(configuration.maxMessageBytes == 1024)
        #expect(configuration.maxPipelinedCalls == 100_000)
        #expect(configuration.callTimeout == .seconds(90))
        #expect(configuration.logLevel == "debug")
    }

    @Test func everyProviderSetting() throws {
        let configuration = try parseConfig(
            """
            [providers.corp-idp_2]
            kind = "oauth2"
            issuer = "https://login.example"
            revocation_endpoint = "https://login.example/revoke"
            client_id = "tokend"
            client_auth = "none"
            ca_file = "certs/corp.pem"
            max_token_age = "12h"
            max_session_age = "90d"
            session_warning = "1d"
            refresh_margin = "30s"
            refresh_at = 0.5

            [providers.second]
            kind = "oauth2"
            token_endpoint = "https://b.example/token"
            client_id = "b"
            client_auth = "client_secret_post"
            client_secret_file = "/etc/tokend/b.secret"
            """, secrets: ["/etc/tokend/b.secret": "b-secret\r\n\n"])
        #expect(configuration.providers.keys.sorted() == ["corp-idp_2", "second"])
        let first = try #require(configuration.providers["corp-idp_2"])
        #expect(
            first.kind
                == .oauth2(
                    OAuth2Settings(
                        issuer: "https://login.example", revocationEndpoint: "https://login.example/revoke",
                        clientID: "tokend", clientAuthentication: ClientAuthentication.none, caFile: "/srv/tokend/etc/certs/corp.pem")))
        #expect(
            first.refreshPolicy
                == RefreshPolicy(
                    maxTokenAge: .seconds(12 * 3600), maxSessionAge: .seconds(90 * 86400),
                    sessionWarningLead: .seconds(86400), refreshAtFraction: 0.5, minimumMargin: .seconds(30)))
        let second = try #require(configuration.providers["second"])
        guard case .oauth2(let settings) = second.kind else { return }
        #expect(settings.clientAuthentication == .clientSecretPost)
        #expect(settings.clientSecret == SecretString("b-secret"))
    }

    @Test func templateConfigIsValid() throws {
        // The helper's baseline must parse, or every error test below would pass for the wrong reason.
        let configuration = try parseConfig(config())
        #expect(configuration.providers["example"] != nil)
    }
}

struct ConfigurationErrorTests {
    struct BadConfig: Sendable, CustomTestStringConvertible {
        var name: String
        var text: String
        var key: String
        var problem: String
        var secrets: [String: String] = ["/srv/tokend/etc/example-client-secret": "s3cret\n"]
        var testDescription: String { name }
    }

    static let cases: [BadConfig] = [
        BadConfig(name: "unknown top-level key", text: config(top: "colour = \"blue\""), key: "colour", problem: "unknown key"),
        BadConfig(name: "unknown top-level table", text: config() + "[deamon]\nx = 1\n", key: "deamon", problem: "unknown key"),
        BadConfig(name: "unknown daemon key", text: config(daemon: "sockett = \"/x\""), key: "daemon.sockett", problem: "unknown key"),
        BadConfig(
            name: "unknown provider key", text: config(provider: "client_secret = \"x\""), key: "providers.example.client_secret",
            problem: "unknown key"),
        BadConfig(
            name: "max_connections string", text: config(daemon: "max_connections = \"x\""), key: "daemon.max_connections",
            problem: "expected an integer, found a string"),
        BadConfig(
            name: "max_connections float", text: config(daemon: "max_connections = 1.5"), key: "daemon.max_connections",
            problem: "expected an integer, found a float"),
        BadConfig(
            name: "max_connections zero", text: config(daemon: "max_connections = 0"), key: "daemon.max_connections",
            problem: "0 is out of range (1…1000000)"),
        BadConfig(
            name: "max_message_bytes small", text: config(daemon: "max_message_bytes = 100"), key: "daemon.max_message_bytes",
            problem: "100 is out of range"),
        BadConfig(
            name: "admin_groups string", text: config(daemon: "admin_groups = \"g\""), key: "daemon.admin_groups",
            problem: "expected an array of strings, found a string"),
        BadConfig(
            name: "admin_groups mixed", text: config(daemon: "admin_groups = [\"g\", 1]"), key: "daemon.admin_groups",
            problem: "found an element that is an integer"),
        BadConfig(
            name: "socket_mode 999", text: config(daemon: "socket_mode = \"999\""), key: "daemon.socket_mode",
            problem: "\"999\" is not an octal file mode"),
        BadConfig(
            name: "socket_mode too big", text: config(daemon: "socket_mode = \"1777\""), key: "daemon.socket_mode",
            problem: "is not an octal file mode"),
        BadConfig(
            name: "socket_mode integer", text: config(daemon: "socket_mode = 666"), key: "daemon.socket_mode",
            problem: "expected a string, found an integer"),
        BadConfig(
            name: "admin_socket the public socket", text: config(daemon: "admin_socket = \"/run/tokend/io.tokend\""),
            key: "daemon.admin_socket", problem: "is the same path as daemon.socket"),
        BadConfig(
            name: "admin_socket too long", text: config(daemon: "admin_socket = \"/run/\(String(repeating: "a", count: 110))\""),
            key: "daemon.admin_socket", problem: "is longer than a Unix socket address holds"),
        BadConfig(
            name: "socket boolean", text: config(daemon: "state_directory = true"), key: "daemon.state_directory",
            problem: "expected a string, found a boolean"),
        BadConfig(
            name: "allow_self_enrolment string", text: config(daemon: "allow_self_enrolment = \"yes\""),
            key: "daemon.allow_self_enrolment", problem: "expected true or false, found a string"),
        BadConfig(
            name: "log level", text: config(daemon: "log_level = \"loud\""), key: "daemon.log_level", problem: "\"loud\" is not one of"),
        BadConfig(
            name: "call_timeout", text: config(daemon: "call_timeout = \"soon\""), key: "daemon.call_timeout", problem: "is not a duration"),
        BadConfig(name: "daemon not a table", text: "daemon = 5\n", key: "daemon", problem: "expected a table, found an integer"),
        BadConfig(
            name: "providers not a table", text: "providers = \"x\"\n", key: "providers", problem: "expected a table, found a string"),
        BadConfig(
            name: "provider not a table", text: "[providers]\nexample = 1\n", key: "providers.example",
            problem: "expected a table, found an integer"),
        BadConfig(
            name: "provider name", text: "[providers.\"bad name\"]\nkind = \"oauth2\"\n", key: "providers.bad name",
            problem: "provider names are letters, digits, '-' and '_'"),
        BadConfig(
            name: "missing kind", text: config().replacingFirst("kind = \"oauth2\"", with: ""), key: "providers.example.kind",
            problem: "is required"),
        BadConfig(
            name: "empty kind", text: config().replacingFirst("kind = \"oauth2\"", with: "kind = \"\""), key: "providers.example.kind",
            problem: "must not be empty"),
        BadConfig(
            name: "missing client_id", text: config().replacingFirst("client_id = \"tokend\"", with: ""),
            key: "providers.example.client_id",
            problem: "is required"),
        BadConfig(
            name: "missing token_endpoint", text: config().replacingFirst("token_endpoint = \"https://idp.example/token\"", with: ""),
            key: "providers.example.token_endpoint", problem: "is required (or set issuer to discover it)"),
        BadConfig(
            name: "unknown kind", text: config().replacingFirst("kind = \"oauth2\"", with: "kind = \"saml\""),
            key: "providers.example.kind",
            problem: "unknown provider kind \"saml\" (supported: oauth2"),
        BadConfig(
            name: "token_endpoint not http", text: config().replacingFirst("https://idp.example/token", with: "ftp://idp.example/token"),
            key: "providers.example.token_endpoint",
            problem: "\"ftp://idp.example/token\" uses ftp; only https (or http to loopback) is allowed"),
        BadConfig(
            name: "issuer not http", text: config(provider: "issuer = \"idp.example\""), key: "providers.example.issuer",
            problem: "is not an absolute http(s) URL"),
        BadConfig(
            name: "bad duration", text: config(provider: "max_token_age = \"30\""), key: "providers.example.max_token_age",
            problem: "\"30\" is not a duration"),
        BadConfig(
            name: "bad duration unit", text: config(provider: "max_session_age = \"3w\""), key: "providers.example.max_session_age",
            problem: "\"3w\" is not a duration"),
        BadConfig(
            name: "zero duration", text: config(provider: "refresh_margin = \"0s\""), key: "providers.example.refresh_margin",
            problem: "must be longer than zero"),
        BadConfig(
            name: "duration as integer", text: config(provider: "max_token_age = 30"), key: "providers.example.max_token_age",
            problem: "expected a string, found an integer"),
        BadConfig(
            name: "refresh_at too big", text: config(provider: "refresh_at = 1.5"), key: "providers.example.refresh_at",
            problem: "1.5 must be between 0 and 1"),
        BadConfig(
            name: "refresh_at integer", text: config(provider: "refresh_at = 1"), key: "providers.example.refresh_at",
            problem: "expected a number between 0 and 1, found an integer"),
        BadConfig(
            name: "client_auth unknown", text: config(provider: "client_auth = \"client_secret_jwt\""),
            key: "providers.example.client_auth",
            problem: "\"client_secret_jwt\" is not one of none, client_secret_basic, client_secret_post, private_key_jwt"),
        BadConfig(
            name: "client_secret_file unreadable", text: config(), key: "providers.example.client_secret_file",
            problem: "cannot read /srv/tokend/etc/example-client-secret: no such file: /srv/tokend/etc/example-client-secret", secrets: [:]),
        BadConfig(
            name: "client_secret_file empty", text: config(), key: "providers.example.client_secret_file",
            problem: "/srv/tokend/etc/example-client-secret is empty", secrets: ["/srv/tokend/etc/example-client-secret": "\n"]),
        BadConfig(
            name: "client_secret_file missing for basic",
            text: config().replacingFirst("client_secret_file = \"example-client-secret\"", with: ""),
            key: "providers.example.client_secret_file", problem: "is required with client_auth = \"client_secret_basic\""),
        BadConfig(
            name: "client_secret_file missing for post",
            text: config(provider: "client_auth = \"client_secret_post\"").replacingFirst(
                "client_secret_file = \"example-client-secret\"", with: ""),
            key: "providers.example.client_secret_file", problem: "is required with client_auth = \"client_secret_post\""),
        BadConfig(
            name: "date value", text: config(daemon: "socket_mode = 1979-05-27"), key: "daemon.socket_mode",
            problem: "expected a string, found a "),
        BadConfig(
            name: "narrowed_tokens not a boolean", text: config(provider: "narrowed_tokens = \"yes\""),
            key: "providers.example.narrowed_tokens", problem: "expected true or false, found a string"),
    ]

    @Test(arguments: cases)
    func badConfigurationNamesFileKeyAndProblem(bad: BadConfig) throws {
        let error = try #require(configError(bad.text, secrets: bad.secrets), "accepted: \(bad.text)")
        #expect(error.file == configFile)
        #expect(error.key == bad.key)
        #expect(error.problem.contains(bad.problem), "problem: \(error.problem)")
        #expect(error.description == "\(configFile): \(bad.key): \(error.problem)")
    }

    @Test func emptySecretStillReportsTheFileAndKeyOnce() throws {
        // The "is empty" error is thrown inside the read's do/catch; it must not be rewrapped as
        // "cannot read ...".
        let error = try #require(configError(config(), secrets: ["/srv/tokend/etc/example-client-secret": ""]))
        #expect(!error.problem.contains("cannot read"))
    }

    @Test func syntaxErrorReportsLineAndColumn() throws {
        let text = "[daemon]\nsocket = \"/x\"\nmax_connections = = 3\n"
        let error = try #require(configError(text))
        #expect(error.file == configFile)
        #expect(error.key == "")
        #expect(error.problem.hasPrefix("line 3, column "), "\(error.problem)")
        #expect(error.description.hasPrefix("\(configFile): line 3, column "))
    }

    @Test(arguments: [
        ("socket = \"unterminated\n", 1), ("[daemon]\n\n\n\nx = 1\nx = 2\n", 6), ("[daemon\n", 1), ("a = 1\n[a]\n", 2),
    ])
    func syntaxErrorsAtVariousLines(text: String, line: Int) throws {
        let error = try #require(configError(text))
        #expect(error.key == "")
        #expect(error.problem.hasPrefix("line \(line), column "), "\(error.problem)")
    }

    @Test func syntaxErrorColumnPointsIntoTheLine() throws {
        let error = try #require(configError("x = 1\nyy = @\n"))
        // "yy = @": the offending character is in column 6.
        #expect(error.problem.prefix(while: { $0 != ":" }) == "line 2, column 6", "\(error.problem)")
    }
}

struct PathResolutionTests {
    let parser = ConfigurationParser(file: configFile, baseDirectory: "/srv/tokend/etc") { _ in "" }

    @Test(arguments: [
        ("tokend.sock", "/srv/tokend/etc/tokend.sock"), ("../run/tokend.sock", "/srv/tokend/run/tokend.sock"),
        ("./a/./b", "/srv/tokend/etc/a/b"), ("a//b/", "/srv/tokend/etc/a/b"), ("/abs/path", "/abs/path"),
        ("/abs/../other", "/other"), ("../../../x", "/x"), ("/a/b/../../c", "/c"),
        // Above the root there is nothing to go up to: "/.." is "/".
        ("../../../../x", "/x"), ("/../etc/tokend", "/etc/tokend"),
    ])
    func resolve(path: String, expected: String) {
        #expect(parser.resolve(path) == expected)
    }
}

extension String {
    func replacingFirst(_ target: String, with replacement: String) -> String {
        var copy = self
        guard let range = copy.firstRange(of: target) else { fatalError("\(target) not in template") }
        copy.replaceSubrange(range, with: replacement)
        return copy
    }
}

@Suite struct AdminSocketConfigurationTests {
    @Test func theAdministratorsSocketIsBesideThePublicOneUnlessSetOrTurnedOff() throws {
        #expect(try parseConfig(config()).adminSocketPath == "/run/tokend/io.tokend.admin")
        #expect(DaemonConfiguration().adminSocketPath == "/run/tokend/io.tokend.admin")
        #expect(try parseConfig(exampleConfig).adminSocketPath == "/srv/tokend/run/tokend.sock.admin")
        #expect(try parseConfig(config(daemon: #"admin_socket = "../admin.sock""#)).adminSocketPath == "/srv/tokend/admin.sock")
        #expect(try parseConfig(config(daemon: #"admin_socket = """#)).adminSocketPath == nil)
    }
}

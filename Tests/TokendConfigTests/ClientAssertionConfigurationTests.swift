import Testing
import TokendCore

@testable import TokendConfig

/// `client_auth = "private_key_jwt"` and its keys. Whether the PEM holds a usable key is
/// TokendOAuth's check (`ClientAssertionSignerTests`); here, what the parser decides.
struct ClientAssertionConfigurationTests {
    static let keyPath = "/srv/tokend/etc/client.key"
    static let pem = "-----BEGIN PRIVATE KEY-----\nMIGH\n-----END PRIVATE KEY-----\n"
    static let secrets = ["/srv/tokend/etc/example-client-secret": "s3cret\n", keyPath: pem]

    static func provider(_ lines: String) -> String {
        config().replacingFirst("client_secret_file = \"example-client-secret\"", with: lines)
    }

    @Test func aKeyFileWithKidAndAudience() throws {
        let text = Self.provider(
            """
            client_auth = "private_key_jwt"
            client_assertion_key_file = "client.key"
            client_assertion_kid = "key-1"
            client_assertion_audience = "https://idp.example/"
            """)
        let configuration = try parseConfig(text, secrets: Self.secrets)
        guard case .oauth2(let settings)? = configuration.providers["example"]?.kind else {
            Issue.record("not an oauth2 provider")
            return
        }
        #expect(settings.clientAuthentication == .privateKeyJWT)
        let key = try #require(settings.clientAssertionKey)
        #expect(key.pem.value == Self.pem)
        #expect(key.source == Self.keyPath)
        #expect(key.keyID == "key-1")
        #expect(key.audience == .url("https://idp.example/"))
        #expect(settings.clientSecret == nil)
    }

    @Test func aSystemdCredential() throws {
        let document = try TOMLDocument.parse(
            Self.provider(#"client_auth = "private_key_jwt"\#nclient_assertion_key_credential = "idp-key""#), file: configFile)
        var parser = ConfigurationParser(file: configFile, baseDirectory: baseDirectory) { path in
            guard path == "/run/credentials/tokend.service/idp-key" else { throw SecretFileMissing(path: path) }
            return Self.pem
        }
        parser.credentialsDirectory = "/run/credentials/tokend.service"
        let configuration = try parser.parse(document)
        guard case .oauth2(let settings)? = configuration.providers["example"]?.kind else {
            Issue.record("not an oauth2 provider")
            return
        }
        #expect(settings.clientAssertionKey?.source == "/run/credentials/tokend.service/idp-key")
        #expect(settings.clientAssertionKey?.configurationKey == "client_assertion_key_credential")
        #expect(settings.clientAssertionKey?.audience == .tokenEndpoint)
    }

    static let refusals: [(String, String, String)] = [
        (
            #"client_auth = "private_key_jwt""#, "client_assertion_key_file",
            "is required with client_auth = \"private_key_jwt\" (or client_assertion_key_credential)"
        ),
        (
            #"client_auth = "private_key_jwt"\#nclient_assertion_key_file = "missing.key""#, "client_assertion_key_file",
            "cannot read /srv/tokend/etc/missing.key: no such file: /srv/tokend/etc/missing.key"
        ),
        (
            #"client_auth = "private_key_jwt"\#nclient_assertion_key_file = "example-client-secret""#, "client_assertion_key_file",
            "/srv/tokend/etc/example-client-secret is not a PEM private key"
        ),
        (#"client_assertion_key_file = "client.key""#, "client_auth", "must be \"private_key_jwt\" when a client assertion key is set"),
        (
            #"client_auth = "private_key_jwt"\#nclient_assertion_key_file = "client.key"\#nclient_assertion_audience = "issuer""#,
            "client_assertion_audience", "\"issuer\" needs issuer to be set"
        ),
        (
            #"client_auth = "private_key_jwt"\#nclient_assertion_key_file = "client.key"\#nclient_assertion_audience = "somewhere""#,
            "client_assertion_audience", "\"somewhere\" is not token_endpoint, issuer or a URL"
        ),
        (
            #"client_auth = "private_key_jwt"\#nclient_assertion_key_credential = "idp-key""#, "client_assertion_key_credential",
            "needs $CREDENTIALS_DIRECTORY (LoadCredential= or SetCredential= in the unit)"
        ),
        (
            #"client_auth = "private_key_jwt"\#nclient_assertion_key_file = "client.key"\#nclient_assertion_key_credential = "k""#,
            "client_assertion_key_credential", "cannot be used with client_assertion_key_file"
        ),
        (#"client_assertion_kid = "k""#, "client_assertion_key_file", "is required with client_assertion_kid or client_assertion_audience"),
    ]

    @Test(arguments: 0..<refusals.count)
    func refused(index: Int) {
        let (lines, key, problem) = Self.refusals[index]
        let error = configError(Self.provider(lines), secrets: Self.secrets)
        #expect(error?.key == "providers.example.\(key)", "\(lines)")
        #expect(error?.problem == problem, "\(lines)")
        #expect(error.map { !$0.description.contains("MIGH") } ?? true, "no key material in the message")
    }
}

/// `proxy` and `proxy_credentials_file` of a provider.
struct ProxyConfigurationTests {
    static let secrets = ["/srv/tokend/etc/example-client-secret": "s3cret\n", "/srv/tokend/etc/proxy-auth": "tokend:pr0xy-pw\n"]

    func setting(_ lines: String) throws -> ProxySetting? {
        let configuration = try parseConfig(config(provider: lines), secrets: Self.secrets)
        guard case .oauth2(let settings)? = configuration.providers["example"]?.kind else { return nil }
        return settings.proxy
    }

    @Test func settings() throws {
        #expect(try setting("") == .environment)
        #expect(try setting(#"proxy = "direct""#) == .direct)
        #expect(try setting(#"proxy = "http://proxy.corp:3128""#) == .server(ProxyServer(host: "proxy.corp", port: 3128)))
        let authenticated = try setting(#"proxy = "http://proxy.corp:3128"\#nproxy_credentials_file = "proxy-auth""#)
        #expect(authenticated == .server(ProxyServer(host: "proxy.corp", port: 3128, credentials: SecretString("tokend:pr0xy-pw"))))
    }

    @Test(arguments: [
        (#"proxy = "https://proxy:443""#, "proxy", "only http:// proxies are supported (tokend tunnels through them with CONNECT)"),
        (
            #"proxy = "http://u:secret-pw@proxy:3128""#, "proxy",
            "has a user name or password in it; put them in proxy_credentials_file instead"
        ),
        (#"proxy_credentials_file = "proxy-auth""#, "proxy_credentials_file", "needs proxy = \"http://host:port\""),
        (
            #"proxy = "http://proxy:3128"\#nproxy_credentials_file = "example-client-secret""#, "proxy_credentials_file",
            "/srv/tokend/etc/example-client-secret does not hold user:password"
        ),
    ])
    func refused(lines: String, key: String, problem: String) {
        let error = configError(config(provider: lines), secrets: Self.secrets)
        #expect(error?.key == "providers.example.\(key)")
        #expect(error?.problem == problem)
        #expect(error.map { !$0.description.contains("secret-pw") && !$0.description.contains("s3cret") } ?? true)
    }
}

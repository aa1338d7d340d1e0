import Testing
import TokendCore

@testable import TokendConfig

/// The settings of the OAuth 2.0 provider `example`.
func oauth2Settings(_ configuration: DaemonConfiguration) throws -> OAuth2Settings {
    guard case .oauth2(let settings)? = configuration.providers["example"]?.kind else { throw SecretFileMissing(path: "providers.example") }
    return settings
}

/// `client_auth = "private_key_jwt"` and its keys. Whether the PEM holds a usable key is
/// TokendOAuth's check (`ClientAssertionSignerTests`); here, what the parser decides.
struct ClientAssertionConfigurationTests {
    static let keyPath = "/srv/tokend/etc/client.key"
    static let pem = "-----BEGIN PRIVATE KEY-----\nMIGH\n-----END PRIVATE KEY-----\n"
    static let secrets = ["/srv/tokend/etc/example-client-secret": "s3cret\n", keyPath: pem]

    static func provider(_ lines: String) -> String {
        config().replacingFirst("client_secret_file = \"example-client-secret\"", with: lines)
    }

    @Test func narrowedTokensAreOffUnlessAProviderAllowsThem() throws {
        #expect(try oauth2Settings(try parseConfig(config())).narrowedTokens == false)
        let configuration = try parseConfig(config(provider: "narrowed_tokens = true"))
        #expect(try oauth2Settings(configuration).narrowedTokens)
        #expect(configuration.providers["example"]?.allowsNarrowedTokens == true)
    }

    @Test func aKeyFileWithKidAndAudience() throws {
        let text = Self.provider(
            """
            client_auth = "private_key_jwt"
            client_assertion_key_file = "client.key"
            client_assertion_kid = "key-1"
            client_assertion_audience = "https://idp.example/"
            """)
        let settings = try oauth2Settings(try parseConfig(text, secrets: Self.secrets))
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
        let settings = try oauth2Settings(try parser.parse(document))
        #expect(settings.clientAssertionKey?.source == "/run/credentials/tokend.service/idp-key")
        #expect(settings.clientAssertionKey?.configurationKey == "client_assertion_key_credential")
        #expect(settings.clientAssertionKey?.audience == .endpoint)
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
            "client_assertion_audience", "\"somewhere\" is not endpoint, token_endpoint, issuer or a URL"
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
        try oauth2Settings(try parseConfig(config(provider: lines), secrets: Self.secrets)).proxy
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

/// The mutual-TLS identity keys and `tls_client_auth`.
struct TLSClientIdentityConfigurationTests {
    static let certificate = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    static let key = "-----BEGIN PRIVATE KEY-----\nMIGH\n-----END PRIVATE KEY-----\n"
    static let secrets = [
        "/srv/tokend/etc/example-client-secret": "s3cret\n", "/srv/tokend/etc/client.pem": certificate,
        "/srv/tokend/etc/client.key": key,
    ]

    @Test func tlsClientAuthWithACertificateAndKey() throws {
        let text = ClientAssertionConfigurationTests.provider(
            """
            client_auth = "tls_client_auth"
            tls_client_certificate_file = "client.pem"
            tls_client_key_file = "client.key"
            """)
        let settings = try oauth2Settings(try parseConfig(text, secrets: Self.secrets))
        #expect(settings.clientAuthentication == .tlsClientAuth && settings.clientAuthentication.usesTLSCertificate)
        #expect(settings.tlsClientIdentity?.certificatePEM == Self.certificate)
        #expect(settings.tlsClientIdentity?.keyPEM.value == Self.key)
        #expect(settings.tlsClientIdentity?.keySource == "/srv/tokend/etc/client.key")
    }

    /// A certificate with another client authentication: mutual TLS at the transport only.
    @Test func aCertificateBesideASecret() throws {
        let settings = try oauth2Settings(
            try parseConfig(
                config(provider: "tls_client_certificate_file = \"client.pem\"\ntls_client_key_file = \"client.key\""),
                secrets: Self.secrets))
        #expect(settings.clientAuthentication == .clientSecretBasic && settings.tlsClientIdentity != nil)
    }

    @Test(arguments: [
        (
            #"client_auth = "self_signed_tls_client_auth""#, "tls_client_certificate_file",
            "is required with client_auth = \"self_signed_tls_client_auth\""
        ),
        (
            #"tls_client_key_file = "client.key""#, "tls_client_certificate_file",
            "is required with tls_client_key_file or tls_client_key_credential"
        ),
        (
            #"tls_client_certificate_file = "client.pem""#, "tls_client_key_file",
            "is required with tls_client_certificate_file (or tls_client_key_credential)"
        ),
        (
            #"tls_client_certificate_file = "client.key"\#ntls_client_key_file = "client.key""#, "tls_client_certificate_file",
            "/srv/tokend/etc/client.key is not a PEM certificate"
        ),
        (
            #"tls_client_certificate_file = "client.pem"\#ntls_client_key_file = "client.pem""#, "tls_client_key_file",
            "/srv/tokend/etc/client.pem is not a PEM private key"
        ),
    ])
    func refused(lines: String, key: String, problem: String) {
        let error = configError(ClientAssertionConfigurationTests.provider(lines), secrets: Self.secrets)
        #expect(error?.key == "providers.example.\(key)", "\(lines)")
        #expect(error?.problem == problem, "\(lines)")
        #expect(error.map { !$0.description.contains("MIGH") } ?? true)
    }
}

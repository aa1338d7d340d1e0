import TokendCore

/// Validates a configuration document and turns it into a `DaemonConfiguration`.
///
/// Pure apart from `readSecretFile`, which the caller supplies (the loader reads real files;
/// tests pass a dictionary). Relative paths resolve against `baseDirectory`, the configuration
/// file's folder.
public struct ConfigurationParser {
    public var file: String
    public var baseDirectory: String
    public var readSecretFile: (String) throws -> String
    /// `$CREDENTIALS_DIRECTORY`: where systemd puts the unit's credentials (`*_credential` keys).
    public var credentialsDirectory: String?

    public init(file: String, baseDirectory: String, readSecretFile: @escaping (String) throws -> String) {
        self.file = file
        self.baseDirectory = baseDirectory
        self.readSecretFile = readSecretFile
    }

    public func parse(_ document: ConfigValue) throws(ConfigurationError) -> DaemonConfiguration {
        var root = try ConfigTableReader(file: file, path: "", value: document)
        var daemon = try ConfigTableReader(file: file, path: "daemon", value: root.raw("daemon"))
        var configuration = DaemonConfiguration(sourceFile: file)

        if let socket = try daemon.string("socket") { configuration.socketPath = resolve(socket) }
        configuration.adminSocketPath = try parseAdminSocket(&daemon, socketPath: configuration.socketPath)
        if let mode = try daemon.string("socket_mode") {
            guard let value = UInt32(mode, radix: 8), value <= 0o777 else {
                throw daemon.error("socket_mode", "\"\(mode)\" is not an octal file mode such as \"0666\"")
            }
            configuration.socketMode = value
        }
        if let state = try daemon.string("state_directory") {
            configuration.stateDirectory = resolve(state)
            configuration.keyFile = configuration.stateDirectory + "/tokend.key"
        }
        if let keyFile = try daemon.string("key_file") { configuration.keyFile = resolve(keyFile) }
        if let groups = try daemon.stringArray("admin_groups") { configuration.adminGroups = groups }
        if let allow = try daemon.boolean("allow_self_enrolment") { configuration.allowSelfEnrolment = allow }
        if let max = try daemon.integer("max_connections", in: 1...1_000_000) { configuration.maxConnections = max }
        try parseQuotas(&daemon, into: &configuration)
        if let max = try daemon.integer("max_message_bytes", in: 1024...(16 << 20)) { configuration.maxMessageBytes = max }
        if let max = try daemon.integer("max_pipelined_calls", in: 1...100_000) { configuration.maxPipelinedCalls = max }
        if let timeout = try daemon.duration("call_timeout") { configuration.callTimeout = timeout }
        if let max = try daemon.integer("max_grants_in_flight", in: 1...10_000) { configuration.refreshLimits.maxGrantsInFlight = max }
        if let max = try daemon.integer("max_relogin_commands", in: 1...1000) { configuration.refreshLimits.maxReloginCommands = max }
        if let interval = try daemon.duration("forced_refresh_interval") { configuration.refreshLimits.forcedRefreshInterval = interval }
        if let initial = try daemon.duration("retry_initial") { configuration.refreshLimits.retryInitial = initial }
        if let maximum = try daemon.duration("retry_max") { configuration.refreshLimits.retryMaximum = maximum }
        if let timeout = try daemon.duration("http_connect_timeout") { configuration.refreshLimits.httpConnectTimeout = timeout }
        if let timeout = try daemon.duration("http_timeout") { configuration.refreshLimits.httpTimeout = timeout }
        if let timeout = try daemon.duration("shutdown_timeout") { configuration.shutdownTimeout = timeout }
        if let timeout = try daemon.duration("message_timeout") { configuration.messageTimeout = timeout }
        if let level = try daemon.string("log_level") {
            let levels = ["trace", "debug", "info", "notice", "warning", "error", "critical"]
            guard levels.contains(level) else {
                throw daemon.error("log_level", "\"\(level)\" is not one of \(levels.joined(separator: ", "))")
            }
            configuration.logLevel = level
        }
        configuration.nodeName = try parseNodeName(&daemon)
        try daemon.finish()

        let providersReader = try ConfigTableReader(file: file, path: "providers", value: root.raw("providers"))
        for name in providersReader.tableNames() {
            guard Self.isValidName(name) else {
                throw providersReader.error(name, "provider names are letters, digits, '-' and '_'")
            }
            configuration.providers[name] = try parseProvider(name: name, value: providersReader.members[name])
        }
        let filesReader = try ConfigTableReader(file: file, path: "token_files", value: root.raw("token_files"))
        for user in filesReader.tableNames() {
            var table = try ConfigTableReader(file: file, path: "token_files.\(user)", value: filesReader.members[user])
            var sink = TokenFileConfiguration(path: resolve(try table.requiredString("path")))
            if let mode = try table.string("mode") {
                guard let value = UInt32(mode, radix: 8), value <= 0o777, value & 0o002 == 0 else {
                    throw table.error("mode", "\"\(mode)\" is not an octal file mode such as \"0640\" (world-writable is refused)")
                }
                sink.mode = value
            }
            if let uids = try table.uidArray("enrolling_uids") { sink.enrollingUIDs = Set(uids) }
            try table.finish()
            configuration.tokenFiles[user] = sink
        }
        configuration.metrics = try parseMetrics(root.raw("metrics"))
        configuration.audit = try parseAudit(root.raw("audit"))
        configuration.store = try parseStore(root.raw("store"), limits: configuration.refreshLimits)
        try parseLoadCredential(root.raw("load_credential"), into: &configuration)
        try root.finish()
        return configuration
    }

    /// `admin_socket`: a path, `""` for none, by default the socket's path + `.admin`. Either
    /// must fit in a socket address.
    func parseAdminSocket(_ daemon: inout ConfigTableReader, socketPath: String) throws(ConfigurationError) -> String? {
        let given = try daemon.string("admin_socket")
        if given == "" { return nil }
        let path = given.map(resolve) ?? socketPath + DaemonConfiguration.adminSocketSuffix
        guard path.utf8.count <= 107 else {
            throw daemon.error(
                "admin_socket",
                "\(path) is longer than a Unix socket address holds (107 bytes); set a shorter path, or \"\" for no administrators' socket")
        }
        guard path != socketPath else { throw daemon.error("admin_socket", "is the same path as daemon.socket") }
        return path
    }

    func parseMetrics(_ value: ConfigValue?) throws(ConfigurationError) -> MetricsConfiguration {
        var table = try ConfigTableReader(file: file, path: "metrics", value: value)
        var metrics = MetricsConfiguration()
        if let listen = try table.string("listen") {
            switch MetricsConfiguration.parseListen(listen, resolve: resolve) {
            case .success(let address): metrics.listen = address
            case .failure(let problem): throw table.error("listen", problem.description)
            }
        }
        if let textfile = try table.string("textfile") { metrics.textfile = resolve(textfile) }
        if let interval = try table.duration("textfile_interval") { metrics.textfileInterval = interval }
        if let perCredential = try table.boolean("per_credential_labels") { metrics.perCredentialLabels = perCredential }
        try table.finish()
        return metrics
    }

    func parseProvider(name: String, value: ConfigValue?) throws(ConfigurationError) -> ProviderConfiguration {
        var table = try ConfigTableReader(file: file, path: "providers.\(name)", value: value)
        let kindName = try table.requiredString("kind")
        var policy = RefreshPolicy()
        if let age = try table.duration("max_token_age") { policy.maxTokenAge = age }
        policy.maxSessionAge = try table.duration("max_session_age")
        if let lead = try table.duration("session_warning") { policy.sessionWarningLead = lead }
        if let margin = try table.duration("refresh_margin") { policy.minimumMargin = margin }
        if let fraction = try table.fraction("refresh_at") { policy.refreshAtFraction = fraction }
        if let assumed = try table.duration("assumed_lifetime") {
            guard assumed >= .seconds(1) else { throw table.error("assumed_lifetime", "must be at least 1s") }
            policy.assumedLifetime = assumed
        }

        let rateLimit = try table.integer("rate_limit", in: 1...100_000)
        let rateBurst = try table.integer("rate_burst", in: 1...100_000)
        let allowSelfEnrolment = try table.boolean("allow_self_enrolment")
        let relogin = try parseRelogin(&table)

        let kind: ProviderConfiguration.Kind
        switch kindName {
        case "oauth2":
            kind = .oauth2(try parseOAuth2(&table))
        case "exec":
            guard let command = try table.stringArray("command"), let program = command.first, !program.isEmpty else {
                throw table.error("command", "is required: the program and its arguments, e.g. [\"/usr/lib/tokend/refresh\"]")
            }
            var resolved = command
            resolved[0] = resolve(program)
            kind = .exec(ExecSettings(command: resolved, timeout: try table.duration("timeout") ?? .seconds(10)))
        case "hat":
            kind = .hat(try parseHAT(&table, policy: &policy))
        default:
            throw table.error("kind", "unknown provider kind \"\(kindName)\" (supported: oauth2, exec, hat)")
        }
        try table.finish()
        var provider = ProviderConfiguration(name: name, kind: kind, refreshPolicy: policy)
        if let rateLimit { provider.rateLimit = Double(rateLimit) }
        if let rateBurst { provider.rateBurst = rateBurst }
        if let allowSelfEnrolment { provider.allowSelfEnrolment = allowSelfEnrolment }
        provider.relogin = relogin
        return provider
    }

    func parseOAuth2(_ table: inout ConfigTableReader) throws(ConfigurationError) -> OAuth2Settings {
        let tokenEndpoint = try table.string("token_endpoint")
        let issuer = try table.string("issuer")
        guard tokenEndpoint != nil || issuer != nil else {
            throw table.error("token_endpoint", "is required (or set issuer to discover it)")
        }
        let revocationEndpoint = try table.string("revocation_endpoint")
        for (key, url) in [("token_endpoint", tokenEndpoint), ("issuer", issuer), ("revocation_endpoint", revocationEndpoint)] {
            guard let url else { continue }
            do {
                _ = try EndpointPolicy.check(url)
            } catch {
                throw table.error(key, error.description)
            }
        }
        var settings = OAuth2Settings(tokenEndpoint: tokenEndpoint, issuer: issuer, clientID: try table.requiredString("client_id"))
        settings.revocationEndpoint = revocationEndpoint
        settings.scope = try table.string("scope")
        if let scopes = try table.stringArray("scopes") {
            guard settings.scope == nil else { throw table.error("scopes", "set either scope or scopes, not both") }
            settings.scope = scopes.joined(separator: " ")
        }
        settings.authorizationEndpoint = try table.string("authorization_endpoint")
        settings.deviceAuthorizationEndpoint = try table.string("device_authorization_endpoint")
        for (key, url) in [
            ("authorization_endpoint", settings.authorizationEndpoint),
            ("device_authorization_endpoint", settings.deviceAuthorizationEndpoint),
        ] {
            guard let url else { continue }
            do {
                _ = try EndpointPolicy.check(url)
            } catch {
                throw table.error(key, error.description)
            }
        }
        settings.redirectPort = try table.integer("redirect_port", in: 1...65535)
        settings.verifyAccessToken = try table.boolean("verify_access_token") ?? false
        settings.dpop = try table.boolean("dpop") ?? false
        settings.dpopBindOnRefresh = try table.boolean("dpop_bind_on_refresh") ?? false
        settings.narrowedTokens = try table.boolean("narrowed_tokens") ?? false
        settings.audience = try table.string("audience")
        if let caFile = try table.string("ca_file") { settings.caFile = resolve(caFile) }
        settings.proxy = try parseProxy(&table)
        if let auth = try table.string("client_auth") {
            guard let method = ClientAuthentication(rawValue: auth) else {
                throw table.error(
                    "client_auth",
                    "\"\(auth)\" is not one of none, client_secret_basic, client_secret_post, private_key_jwt, tls_client_auth, "
                        + "self_signed_tls_client_auth")
            }
            settings.clientAuthentication = method
        }
        if let secretFile = try table.string("client_secret_file") {
            let path = resolve(secretFile)
            do {
                let secret = try readSecretFile(path).trimmingTrailingNewlines()
                guard !secret.isEmpty else { throw table.error("client_secret_file", "\(path) is empty") }
                settings.clientSecret = SecretString(secret)
            } catch let error as ConfigurationError {
                throw error
            } catch {
                throw table.error("client_secret_file", "cannot read \(path): \(error)")
            }
        }
        settings.clientAssertionKey = try parseClientAssertionKey(&table, issuer: settings.issuer)
        settings.tlsClientIdentity = try parseTLSClientIdentity(&table)
        if settings.clientAssertionKey != nil, settings.clientAuthentication != .privateKeyJWT {
            throw table.error("client_auth", "must be \"private_key_jwt\" when a client assertion key is set")
        }
        switch settings.clientAuthentication {
        case .none:
            break
        case .clientSecretBasic, .clientSecretPost:
            if settings.clientSecret == nil {
                throw table.error("client_secret_file", "is required with client_auth = \"\(settings.clientAuthentication.rawValue)\"")
            }
        case .tlsClientAuth, .selfSignedTLSClientAuth:
            if settings.tlsClientIdentity == nil {
                throw table.error(
                    "tls_client_certificate_file", "is required with client_auth = \"\(settings.clientAuthentication.rawValue)\"")
            }
        case .privateKeyJWT:
            if settings.clientAssertionKey == nil {
                throw table.error(
                    "client_assertion_key_file", "is required with client_auth = \"private_key_jwt\" (or client_assertion_key_credential)")
            }
        }
        return settings
    }

    /// `proxy` (`"direct"` or `"http://host:port"`) and `proxy_credentials_file` (`user:password`,
    /// read like a secret); neither set: the environment decides.
    func parseProxy(_ table: inout ConfigTableReader) throws(ConfigurationError) -> ProxySetting {
        let text = try table.string("proxy")
        let credentialsFile = try table.string("proxy_credentials_file")
        guard let text else {
            if credentialsFile != nil { throw table.error("proxy_credentials_file", "needs proxy = \"http://host:port\"") }
            return .environment
        }
        if text == "direct" {
            if credentialsFile != nil { throw table.error("proxy_credentials_file", "needs proxy = \"http://host:port\"") }
            return .direct
        }
        var server: ProxyServer
        do {
            server = try ProxyServer.parse(text, allowCredentials: false)
        } catch {
            throw table.error("proxy", error.description)
        }
        if let credentialsFile {
            let path = resolve(credentialsFile)
            let credentials: String
            do {
                credentials = try readSecretFile(path).trimmingTrailingNewlines()
            } catch {
                throw table.error("proxy_credentials_file", "cannot read \(path): \(error)")
            }
            guard credentials.contains(":"), !credentials.hasPrefix(":") else {
                throw table.error("proxy_credentials_file", "\(path) does not hold user:password")
            }
            server.credentials = SecretString(credentials)
        }
        return .server(server)
    }

    /// `tls_client_certificate_file` with `tls_client_key_file` or `tls_client_key_credential`:
    /// the mutual-TLS identity, read now (a reload picks up renewed files). Whether they parse
    /// and belong together is checked by the daemon (TokendOAuth's `TLSClientIdentityCheck`).
    func parseTLSClientIdentity(_ table: inout ConfigTableReader) throws(ConfigurationError) -> TLSClientIdentity? {
        let certificateFile = try table.string("tls_client_certificate_file")
        let keyFile = try table.string("tls_client_key_file")
        let keyCredential = try table.string("tls_client_key_credential")
        guard let certificateFile else {
            if keyFile != nil || keyCredential != nil {
                throw table.error("tls_client_certificate_file", "is required with tls_client_key_file or tls_client_key_credential")
            }
            return nil
        }
        let certificatePath = resolve(certificateFile)
        let certificate: String
        do {
            certificate = try readSecretFile(certificatePath)
        } catch {
            throw table.error("tls_client_certificate_file", "cannot read \(certificatePath): \(error)")
        }
        guard certificate.contains("-----BEGIN CERTIFICATE-----") else {
            throw table.error("tls_client_certificate_file", "\(certificatePath) is not a PEM certificate")
        }
        let (key, keyPath) = try readPrivateKey(
            table, fileKey: "tls_client_key_file", file: keyFile, credentialKey: "tls_client_key_credential", credential: keyCredential,
            requiredWith: "tls_client_certificate_file")
        var identity = TLSClientIdentity(
            certificatePEM: certificate, keyPEM: SecretString(key.pem), certificateSource: certificatePath, keySource: keyPath)
        identity.keyConfigurationKey = key.configurationKey
        return identity
    }

    /// A private key named by a `*_file` or a `*_credential` key (exactly one of them), read as
    /// PEM text. - Returns: the text with the key that named it, and the path it was read from.
    func readPrivateKey(
        _ table: ConfigTableReader, fileKey: String, file: String?, credentialKey: String, credential: String?, requiredWith: String
    ) throws(ConfigurationError) -> (key: (pem: String, configurationKey: String), path: String) {
        let key: String
        let path: String
        switch (file, credential) {
        case (nil, nil):
            throw table.error(fileKey, "is required with \(requiredWith) (or \(credentialKey))")
        case (let file?, nil):
            key = fileKey
            path = resolve(file)
        case (nil, let name?):
            key = credentialKey
            guard !name.isEmpty, !name.contains("/") else { throw table.error(key, "is not a credential name") }
            guard let directory = credentialsDirectory else {
                throw table.error(key, "needs $CREDENTIALS_DIRECTORY (LoadCredential= or SetCredential= in the unit)")
            }
            path = directory + "/" + name
        case (_?, _?):
            throw table.error(credentialKey, "cannot be used with \(fileKey)")
        }
        let pem: String
        do {
            pem = try readSecretFile(path)
        } catch {
            throw table.error(key, "cannot read \(path): \(error)")
        }
        guard pem.contains("-----BEGIN"), pem.contains("PRIVATE KEY-----") else {
            throw table.error(key, "\(path) is not a PEM private key")
        }
        return ((pem, key), path)
    }

    /// The `private_key_jwt` key: `client_assertion_key_file` (a path) or
    /// `client_assertion_key_credential` (a systemd credential's name, read from
    /// `$CREDENTIALS_DIRECTORY`), with `client_assertion_kid` and `client_assertion_audience`.
    /// Whether the PEM holds a usable key is checked by the daemon when it loads the
    /// configuration (TokendOAuth's `ClientAssertionSigner`), where the crypto library is.
    func parseClientAssertionKey(_ table: inout ConfigTableReader, issuer: String?) throws(ConfigurationError) -> ClientAssertionKey? {
        let file = try table.string("client_assertion_key_file")
        let credential = try table.string("client_assertion_key_credential")
        let keyID = try table.string("client_assertion_kid")
        let audienceText = try table.string("client_assertion_audience")
        guard file != nil || credential != nil else {
            if keyID != nil || audienceText != nil {
                throw table.error("client_assertion_key_file", "is required with client_assertion_kid or client_assertion_audience")
            }
            return nil
        }
        let (key, path) = try readPrivateKey(
            table, fileKey: "client_assertion_key_file", file: file, credentialKey: "client_assertion_key_credential",
            credential: credential, requiredWith: "client_auth = \"private_key_jwt\"")
        let audience: ClientAssertionAudience
        switch audienceText {
        case nil, "endpoint": audience = .endpoint
        case "token_endpoint": audience = .tokenEndpoint
        case "issuer":
            guard issuer != nil else { throw table.error("client_assertion_audience", "\"issuer\" needs issuer to be set") }
            audience = .issuer
        case let url?:
            guard url.hasPrefix("https://") || url.hasPrefix("http://") else {
                throw table.error("client_assertion_audience", "\"\(url)\" is not endpoint, token_endpoint, issuer or a URL")
            }
            audience = .url(url)
        }
        var assertionKey = ClientAssertionKey(pem: SecretString(key.pem), source: path, keyID: keyID, audience: audience)
        assertionKey.configurationKey = key.configurationKey
        return assertionKey
    }

    /// Resolves `path` against the configuration file's folder unless it is absolute.
    public func resolve(_ path: String) -> String {
        if path.hasPrefix("/") { return Self.normalize(path) }
        return Self.normalize(baseDirectory + "/" + path)
    }

    /// Collapses `.`, `..` and repeated slashes, so paths in messages read cleanly.
    static func normalize(_ path: String) -> String {
        var parts: [Substring] = []
        for part in path.split(separator: "/", omittingEmptySubsequences: true) {
            if part == "." { continue }
            if part == "..", let last = parts.last, last != ".." {
                parts.removeLast()
                continue
            }
            // "/.." is "/": an absolute path cannot climb above the root.
            if part == "..", parts.isEmpty, path.hasPrefix("/") { continue }
            parts.append(part)
        }
        return (path.hasPrefix("/") ? "/" : "") + parts.joined(separator: "/")
    }

    static func isValidName(_ name: String) -> Bool {
        !name.isEmpty && name.utf8.count <= 64
            && name.unicodeScalars.allSatisfy {
                $0.properties.isAlphabetic && $0.isASCII || ("0"..."9").contains($0) || $0 == "-" || $0 == "_"
            }
    }
}

extension String {
    func trimmingTrailingNewlines() -> String {
        // By scalars: "\r\n" is one Character, equal to neither "\n" nor "\r".
        var scalars = Substring(self).unicodeScalars
        while let last = scalars.last, last == "\n" || last == "\r" { scalars.removeLast() }
        return String(scalars)
    }
}

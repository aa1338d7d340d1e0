import TokenctlSupport
import TokendClient

#if canImport(Glibc)
    import Glibc
#endif

/// What `token` and the credential helpers (`git-credential`, `kube-credential`,
/// `docker-credential`, `google-credential`) do, whether their command line came
/// through the fast path (``OneShotCommandLine``) or the full parser. Each makes one blocking
/// call (``OneShotCall``) and returns the exit status, having written the result or the reason.
enum OneShotCommands {
    static func run(_ command: OneShotCommandLine) -> Int32 {
        switch command {
        case .token(let common): token(common, rejectedToken: nil)
        case .gitCredential(let common, let operation, let username): gitCredential(common, operation: operation, username: username)
        case .kubeCredential(let common, let apiVersion): kubeCredential(common, apiVersion: apiVersion)
        case .dockerCredential(let common, let operation): dockerCredential(common, operation: operation)
        case .googleCredential(let common, let tokenType): googleCredential(common, tokenType: tokenType)
        }
    }

    private static func credentials(
        _ common: OneShotCommandLine.Common, rejectedToken: String? = nil, scope: String? = nil, resource: String? = nil
    ) -> Result<Credentials, TokendClientError> {
        Result { () throws(TokendClientError) in
            try OneShotCall.credentials(
                socketPath: common.socket, administratorsSocketPath: GlobalOptions.administratorsSocket(explicit: common.socket),
                for: common.user, minValidity: .seconds(common.minValidSeconds), rejectedToken: rejectedToken,
                scope: scope, resource: resource, timeout: .seconds(common.timeoutSeconds))
        }
    }

    /// The reason on stderr — with what to do when only a new login helps, since git and
    /// kubectl show it to a person — and the exit status.
    private static func fail(_ error: TokendClientError, user: String) -> Int32 {
        Terminal.writeError("tokenctl: " + reason(error, user: user))
        return TokenctlExitStatus.status(for: error)
    }

    private static func reason(_ error: TokendClientError, user: String) -> String {
        guard error.code == .reauthenticationRequired else { return error.message }
        return error.message + "; log in again: "
            + (user.hasPrefix("-")
                ? "tokenctl login --provider <provider> --replace -- \(ShellWord.quoted(user))"
                : "tokenctl login \(ShellWord.quoted(user)) --provider <provider> --replace")
    }

    /// Prints the access token and a newline, and nothing else.
    static func token(_ common: OneShotCommandLine.Common, rejectedToken: String?, scope: String? = nil, resource: String? = nil) -> Int32 {
        switch credentials(common, rejectedToken: rejectedToken, scope: scope, resource: resource) {
        case .success(let credentials):
            Terminal.writeOutput(credentials.accessToken)
            return TokenctlExitStatus.success
        case .failure(let error):
            return fail(error, user: common.user)
        }
    }

    /// Prints `Authorization: DPoP <token>` and `DPoP: <proof>`, one per line, for one request.
    static func dpopHeaders(_ common: OneShotCommandLine.Common, method: String, url: String, nonce: String?) -> Int32 {
        do {
            let proof = try OneShotCall.dpopProof(
                socketPath: common.socket, administratorsSocketPath: GlobalOptions.administratorsSocket(explicit: common.socket),
                for: common.user, httpMethod: method, httpURI: url, nonce: nonce,
                minValidity: .seconds(common.minValidSeconds), timeout: .seconds(common.timeoutSeconds))
            Terminal.writeOutput(proof.headers.map { "\($0.name): \($0.value)" }.joined(separator: "\n"))
            return TokenctlExitStatus.success
        } catch {
            return fail(error, user: common.user)
        }
    }

    /// git's credential-helper protocol (``GitCredentialHelper``).
    static func gitCredential(_ common: OneShotCommandLine.Common, operation: String, username: String?) -> Int32 {
        let input: [UInt8]
        do {
            input = try InputReader.readStandardInput(limit: 64 * 1024)
        } catch {
            Terminal.writeError("tokenctl: \(error.description)")
            return TokenctlExitStatus.usage
        }
        let attributes = GitCredentialHelper.attributes(input)
        switch GitCredentialHelper.Operation(operation) {
        case .get:
            switch credentials(common) {
            case .success(let credentials):
                let name = GitCredentialHelper.username(option: username, attributes: attributes)
                Terminal.writeOutput(GitCredentialHelper.answer(username: name, credentials: credentials))
                return TokenctlExitStatus.success
            case .failure(let error):
                return fail(error, user: common.user)
            }
        case .erase:
            // The server refused this token: tokend replaces it (at most once per
            // forced_refresh_interval). Nothing to tell git either way.
            guard let refused = attributes["password"], !refused.isEmpty else { return TokenctlExitStatus.success }
            if case .failure(let error) = credentials(common, rejectedToken: refused) {
                Terminal.writeError("tokenctl: \(error.message)")
            }
            return TokenctlExitStatus.success
        case .store, .other:
            return TokenctlExitStatus.success
        }
    }

    /// A Kubernetes ExecCredential (``KubernetesExecCredential``).
    static func kubeCredential(_ common: OneShotCommandLine.Common, apiVersion: String?) -> Int32 {
        let version: String
        do {
            version = try KubernetesExecCredential.apiVersion(
                execInfo: getenv("KUBERNETES_EXEC_INFO").map { String(cString: $0) }, requested: apiVersion)
        } catch {
            Terminal.writeError("tokenctl: \(error.description)")
            return TokenctlExitStatus.usage
        }
        switch credentials(common) {
        case .success(let credentials):
            Terminal.writeOutput(KubernetesExecCredential.render(apiVersion: version, credentials: credentials))
            return TokenctlExitStatus.success
        case .failure(let error):
            return fail(error, user: common.user)
        }
    }
}

extension OneShotCommands {
    /// Docker's credential-helper protocol (``DockerCredentialHelper``), with the registry →
    /// user mapping from the caller's mapping file.
    static func dockerCredential(_ common: OneShotCommandLine.Common, operation: String) -> Int32 {
        let operation = DockerCredentialHelper.Operation(operation)
        if case .other(let name) = operation {
            Terminal.writeError("tokenctl: docker-credential: '\(name)' is not an operation (get, store, erase or list)")
            return TokenctlExitStatus.usage
        }
        var input: [UInt8] = []
        if operation != .list {
            do {
                input = try InputReader.readStandardInput(limit: 64 * 1024)
            } catch {
                Terminal.writeError("tokenctl: \(error.description)")
                return TokenctlExitStatus.usage
            }
        }
        // The tool hands over the credential it would keep; tokend keeps its own.
        if operation == .store { return TokenctlExitStatus.success }
        let entries: [DockerCredentialHelper.Entry]
        switch dockerMapping() {
        case .success(let mapping): entries = mapping
        case .failure(let problem):
            Terminal.writeError("tokenctl: \(problem.description)")
            return TokenctlExitStatus.usage
        }
        func mapped(_ entry: DockerCredentialHelper.Entry) -> OneShotCommandLine.Common {
            var mapped = common
            mapped.user = entry.user
            return mapped
        }
        let serverURL = String(decoding: input, as: UTF8.self)
        switch operation {
        case .get:
            guard let entry = DockerCredentialHelper.entry(for: serverURL, in: entries) else {
                Terminal.writeOutput(DockerCredentialHelper.notFound)
                return TokenctlExitStatus.other
            }
            switch credentials(mapped(entry)) {
            case .success(let credentials):
                Terminal.writeOutput(DockerCredentialHelper.answer(serverURL: serverURL, entry: entry, credentials: credentials))
                return TokenctlExitStatus.success
            case .failure(let error):
                return fail(error, user: entry.user)
            }
        case .erase:
            // The registry refused the token the tool had: tokend replaces the current one (at
            // most once per forced_refresh_interval), so the next get is fresh.
            guard let entry = DockerCredentialHelper.entry(for: serverURL, in: entries) else { return TokenctlExitStatus.success }
            var current = mapped(entry)
            current.minValidSeconds = 0
            let replaced = credentials(current).flatMap { credentials(current, rejectedToken: $0.accessToken) }
            if case .failure(let error) = replaced { Terminal.writeError("tokenctl: " + reason(error, user: entry.user)) }
            return TokenctlExitStatus.success
        case .list:
            // Only the registries whose credential tokend hands this caller.
            var readable: [String: Bool] = [:]
            let shown = entries.filter { entry in
                if let known = readable[entry.user] { return known }
                var probe = mapped(entry)
                probe.minValidSeconds = 0
                let answered = (try? credentials(probe).get()) != nil
                readable[entry.user] = answered
                return answered
            }
            Terminal.writeOutput(DockerCredentialHelper.list(shown))
            return TokenctlExitStatus.success
        case .store, .other:
            return TokenctlExitStatus.success
        }
    }

    private static func dockerMapping() -> Result<[DockerCredentialHelper.Entry], DockerCredentialHelper.MappingError> {
        guard let path = DockerCredentialHelper.mappingPath(environment: { getenv($0).map { String(cString: $0) } }) else {
            return .failure(.init(description: "docker-credential: neither XDG_CONFIG_HOME nor HOME is set, so there is no mapping file"))
        }
        // No file: no registry is mapped, and every get is answered "not found".
        guard access(path, F_OK) == 0 else { return .success([]) }
        do {
            let text = try InputReader.readFile(path, limit: 1 << 20)
            return Result { () throws(DockerCredentialHelper.MappingError) in
                try DockerCredentialHelper.mapping(String(decoding: text, as: UTF8.self))
            }
            .mapError { .init(description: "\(path): \($0.description)") }
        } catch {
            return .failure(.init(description: error.description))
        }
    }

    /// Google's executable-sourced credential response (``GoogleExecutableResponse``). A
    /// failure is answered on stdout too, since the library shows that answer's message.
    static func googleCredential(_ common: OneShotCommandLine.Common, tokenType: GoogleExecutableResponse.TokenType) -> Int32 {
        switch credentials(common) {
        case .success(let credentials):
            Terminal.writeOutput(GoogleExecutableResponse.success(credentials, tokenType: tokenType))
            return TokenctlExitStatus.success
        case .failure(let error):
            Terminal.writeOutput(GoogleExecutableResponse.failure(code: error.code.description, message: reason(error, user: common.user)))
            return fail(error, user: common.user)
        }
    }
}

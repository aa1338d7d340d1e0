import TokendClient

#if canImport(Glibc)
    import Glibc
#endif

/// What `token`, `git-credential` and `kube-credential` do, whether their command line came
/// through the fast path (``OneShotCommandLine``) or the full parser. Each makes one blocking
/// call (``OneShotCall``) and returns the exit status, having written the result or the reason.
enum OneShotCommands {
    static func run(_ command: OneShotCommandLine) -> Int32 {
        switch command {
        case .token(let common): token(common, rejectedToken: nil)
        case .gitCredential(let common, let operation, let username): gitCredential(common, operation: operation, username: username)
        case .kubeCredential(let common, let apiVersion): kubeCredential(common, apiVersion: apiVersion)
        }
    }

    private static func credentials(
        _ common: OneShotCommandLine.Common, rejectedToken: String? = nil, scope: String? = nil, resource: String? = nil
    ) -> Result<Credentials, TokendClientError> {
        Result { () throws(TokendClientError) in
            try OneShotCall.credentials(
                socketPath: common.socket, for: common.user, minValidity: .seconds(common.minValidSeconds), rejectedToken: rejectedToken,
                scope: scope, resource: resource, timeout: .seconds(common.timeoutSeconds))
        }
    }

    /// The reason on stderr — with what to do when only a new login helps, since git and
    /// kubectl show it to a person — and the exit status.
    private static func fail(_ error: TokendClientError, user: String) -> Int32 {
        var message = "tokenctl: \(error.message)"
        if error.code == .reauthenticationRequired { message += "; log in again: tokenctl login \(user) --provider <provider> --replace" }
        Terminal.writeError(message)
        return TokenctlExitStatus.status(for: error)
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
                socketPath: common.socket, for: common.user, httpMethod: method, httpURI: url, nonce: nonce,
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

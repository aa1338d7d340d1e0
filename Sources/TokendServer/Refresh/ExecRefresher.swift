import TokendConfig
import TokendCore
import TokendJSON

/// Providers without an OAuth endpoint: a configured command refreshes the token.
///
/// The command gets `{"userIdentifier", "provider", "refreshToken", "scope"}` as JSON on stdin
/// and answers with a token-endpoint-style JSON object on stdout. Secrets go only through the
/// pipe: never in argv or the environment (the child gets a minimal environment), and neither
/// the command's output nor its stderr is logged.
struct ExecRefresher: ProviderRefresher {
    let providerName: String
    let settings: ExecSettings
    static let maximumOutputBytes = 256 * 1024

    func refresh(
        _ credential: Credential, narrowing: TokenNarrowing?, stormPacing: Duration, now: @escaping @Sendable () -> Timestamp
    ) async -> GrantOutcome {
        var input: JSONObject = ["userIdentifier": .string(credential.userIdentifier), "provider": .string(providerName)]
        if let refresh = credential.refreshToken { input["refreshToken"] = .string(refresh.value) }
        if let scope = credential.scope { input["scope"] = .string(scope) }
        var bytes: [UInt8] = []
        JSONWriter.write(.object(input), into: &bytes)
        let result: ExecResult
        do {
            result = try await run(input: bytes)
        } catch {
            return .transient(reason: "the refresh command could not be run: \(error)", retryAfter: nil)
        }
        switch result {
        case .timedOut:
            // Killed mid-run: it may have exchanged the refresh token already.
            return .unanswered(reason: "the refresh command did not finish within \(DurationFormat.humanReadable(settings.timeout))")
        case .exited(let status, let output):
            if status == 0 { return GrantOutcome.classify(status: 200, retryAfterHeader: nil, body: output, now: now()) }
            // A command may say why with an RFC 6749 error object; invalid_grant means a new login.
            if let error = TokenErrorResponse.parse(output), error.isPermanent {
                return .permanent(error: error.error, description: error.errorDescription)
            }
            return .transient(reason: "the refresh command exited with status \(status)", retryAfter: nil)
        case .signalled(let signal):
            return .unanswered(reason: "the refresh command was killed by signal \(signal)")
        }
    }

    func revoke(_ credential: Credential) async -> RevocationOutcome { .unsupported }

    typealias ExecResult = CommandRunner.Result

    private func run(input: [UInt8]) async throws -> ExecResult {
        try await CommandRunner.run(settings.command, input: input, timeout: settings.timeout, maximumOutputBytes: Self.maximumOutputBytes)
    }
}

import Dispatch
import Foundation
import TokendConfig
import TokendCore
import TokendJSON

#if canImport(Glibc)
    import Glibc
#endif

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

    enum ExecResult {
        case exited(Int32, [UInt8])
        case signalled(Int32)
        case timedOut
    }

    private func run(input: [UInt8]) async throws -> ExecResult {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: settings.command[0])
        process.arguments = Array(settings.command.dropFirst())
        process.environment = ["PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"]
        let stdin = Pipe()
        let stdout = Pipe()
        process.standardInput = stdin
        process.standardOutput = stdout
        process.standardError = FileHandle.nullDevice
        try process.run()
        let pid = process.processIdentifier
        // Write the request and close, so the command sees end of input.
        try? stdin.fileHandleForWriting.write(contentsOf: Data(input))
        try? stdin.fileHandleForWriting.close()
        // The pipe is read with blocking reads, so on a Dispatch thread: tasks run on the event
        // loops (ConcurrencyExecutor), and a read blocked there would stall that loop's sockets
        // and timers, the deadline below included.
        let handle = stdout.fileHandleForReading
        let reader = Task {
            await withCheckedContinuation { (continuation: CheckedContinuation<[UInt8], Never>) in
                DispatchQueue.global().async {
                    var collected: [UInt8] = []
                    while collected.count <= Self.maximumOutputBytes, let chunk = try? handle.read(upToCount: 65536), !chunk.isEmpty {
                        collected.append(contentsOf: chunk)
                    }
                    continuation.resume(returning: collected)
                }
            }
        }
        let deadline = ContinuousClock.now + settings.timeout
        while process.isRunning {
            if ContinuousClock.now >= deadline {
                kill(pid, SIGKILL)
                process.waitUntilExit()
                reader.cancel()
                try? stdout.fileHandleForReading.close()
                return .timedOut
            }
            try? await Task.sleep(for: .milliseconds(10))
        }
        let output = await reader.value
        if process.terminationReason == .uncaughtSignal { return .signalled(process.terminationStatus) }
        guard output.count <= Self.maximumOutputBytes else { return .exited(0, Array("{}".utf8)) }
        return .exited(process.terminationStatus, output)
    }
}

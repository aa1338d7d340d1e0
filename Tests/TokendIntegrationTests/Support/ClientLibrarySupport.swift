import Foundation
import Synchronization
import Testing
import TokendClient

/// Records every call of a completion handler, to check it is called exactly once.
final class CompletionRecorder: Sendable {
    private let results = Mutex<[Result<Credentials, any Error>]>([])

    /// The handler to pass to `provideTokenReplacement`.
    var handler: @Sendable (Result<Credentials, any Error>) -> Void {
        { [self] result in results.withLock { $0.append(result) } }
    }

    /// The seed's shape of handler; records `.success` or `.failure` (and a failure for the
    /// impossible "both nil" or "both set").
    var tupleHandler: @Sendable (Credentials?, (any Error)?) -> Void {
        { [self] credentials, error in
            let result: Result<Credentials, any Error>
            switch (credentials, error) {
            case (let credentials?, nil): result = .success(credentials)
            case (nil, let error?): result = .failure(error)
            default: result = .failure(TestFailure("the handler got both or neither of credentials and error"))
            }
            results.withLock { $0.append(result) }
        }
    }

    var count: Int { results.withLock { $0.count } }

    /// Waits for the first call, then `settle` more, and fails on any further call.
    func expectExactlyOnce(
        within timeout: Duration = .seconds(60),
        settle: Duration = .seconds(2),
        sourceLocation: SourceLocation = #_sourceLocation
    ) async throws -> Result<Credentials, any Error> {
        let deadline = ContinuousClock.now + timeout
        while count == 0 {
            guard ContinuousClock.now < deadline else { throw TestFailure("the completion handler was not called within \(timeout)") }
            try await Task.sleep(for: .milliseconds(10))
        }
        try await Task.sleep(for: settle)
        let all = results.withLock { $0 }
        #expect(all.count == 1, "the completion handler was called \(all.count) times", sourceLocation: sourceLocation)
        return all[0]
    }
}

extension Result where Success == Credentials, Failure == any Error {
    /// The `TokendClientError` code of a failure; `nil` for a success or another error.
    var clientErrorCode: TokendClientError.Code? {
        guard case .failure(let error) = self else { return nil }
        return (error as? TokendClientError)?.code
    }

    var credentials: Credentials? {
        guard case .success(let credentials) = self else { return nil }
        return credentials
    }
}

/// An `exec` provider whose refresh takes a while, so that a call is in flight long enough to
/// kill the daemon, time out, or cancel. Each run appends the user identifier to
/// `refresh.calls` before sleeping.
enum SlowRefresher {
    static func install(in directory: ScratchDirectory, sleep seconds: Double) throws -> String {
        let text = """
            #!/usr/bin/python3
            import json, sys, time
            req = json.loads(sys.stdin.read())
            with open(\(String(reflecting: directory.file("refresh.calls"))), "a") as f:
                f.write(req["userIdentifier"] + "\\n")
            time.sleep(\(seconds))
            now = int(time.time())
            sys.stdout.write(json.dumps({"access_token": "slow-" + req["userIdentifier"] + "-" + str(now), "expires_in": 3600}))
            """
        try directory.write("refresh", text, mode: 0o755)
        return directory.file("refresh")
    }

    static func configuration(command: String, extra: String = "") -> String {
        DaemonProcess.configuration(
            extraDaemon: "call_timeout = \"30s\"",
            providers: """
                [providers.example]
                kind = "exec"
                command = ["\(command)"]
                timeout = "20s"
                """) + extra
    }

    /// Refreshes started so far, by user identifier.
    static func started(_ directory: ScratchDirectory) -> [String] {
        let text = (try? String(contentsOfFile: directory.file("refresh.calls"), encoding: .utf8)) ?? ""
        return text.split(separator: "\n").map(String.init)
    }

    static func waitUntilStarted(_ directory: ScratchDirectory, user: String, timeout: Duration = .seconds(30)) async throws {
        let deadline = ContinuousClock.now + timeout
        while !started(directory).contains(user) {
            guard ContinuousClock.now < deadline else { throw TestFailure("the refresh for \(user) did not start") }
            try await Task.sleep(for: .milliseconds(20))
        }
    }
}

/// The daemon's Prometheus endpoint on a Unix socket (`[metrics] listen = "unix:metrics.sock"`),
/// to count what the daemon saw.
enum ScrapedMetrics {
    static let configuration = """

        [metrics]
        listen = "unix:metrics.sock"
        """

    /// One scrape as `series → value`, e.g. `tokend_connections`.
    static func scrape(_ directory: ScratchDirectory) throws -> [String: Double] {
        let response = try httpGet(unixSocket: directory.file("metrics.sock"), path: "/metrics")
        var samples: [String: Double] = [:]
        for line in response.body.split(separator: "\n") where !line.hasPrefix("#") {
            guard let space = line.lastIndex(of: " "), let value = Double(line[line.index(after: space)...]) else { continue }
            samples[String(line[..<space])] = value
        }
        return samples
    }

    static let tokensServed = #"tokend_requests_total{method="ProvideTokenReplacement",error="none"}"#
    static let watches = #"tokend_requests_total{method="Watch",error="none"}"#
    static let connections = "tokend_connections"
}

/// Waits until `condition` holds.
func pollUntil(
    timeout: Duration = .seconds(30),
    _ what: @autoclosure () -> String = "condition",
    _ condition: () throws -> Bool
) async throws {
    let deadline = ContinuousClock.now + timeout
    while try !condition() {
        guard ContinuousClock.now < deadline else { throw TestFailure("\(what()) not met within \(timeout)") }
        try await Task.sleep(for: .milliseconds(20))
    }
}

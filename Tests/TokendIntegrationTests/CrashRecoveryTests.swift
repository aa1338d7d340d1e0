import Foundation
import Testing

/// tokend killed with SIGKILL at random moments while it rotates refresh tokens against the real
/// IdP. Bounded here (a few rounds); `scripts/crash-soak` runs hundreds.
@Suite(.serialized)
struct CrashRecoveryTests {
    struct Outcome {
        var credentials: Int
        var kills: Int
        var grantsInFlightAtKills: Int
        /// Grants tokend sent but got no answer to in time (`grant_outcome=unknown` in its log):
        /// the IdP may have rotated their refresh tokens, as for grants cut off by a kill.
        var grantsUnanswered: Int
        var reauthenticationRequired: Int
        /// Credentials that ended `reauthentication_required` although no grant of theirs had an
        /// unknown outcome (in flight at a kill, or unanswered): must be none.
        var lostWithoutCause: [String]
        var valid: Int
        var integrity: String
        var rows: Int
        /// Distinct user identifiers among the rows: equal to `rows` when nothing is duplicated.
        var distinctUsers: Int
        var seconds: Int
    }

    static func sqlite(_ database: String, _ sql: String) async throws -> String {
        let result = try await runCommand("/usr/bin/sqlite3", [database, sql])
        guard result.status == 0 else { throw TestFailure("sqlite3 failed: \(result.stderr)") }
        return result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// Rounds and credentials per run: small in the normal suite; `scripts/crash-soak` raises them
    /// through `TOKEND_CRASH_ROUNDS` and `TOKEND_CRASH_CREDENTIALS`.
    static var rounds: Int { Int(ProcessInfo.processInfo.environment["TOKEND_CRASH_ROUNDS"] ?? "") ?? 5 }
    static var credentialCount: Int { Int(ProcessInfo.processInfo.environment["TOKEND_CRASH_CREDENTIALS"] ?? "") ?? 16 }
    /// A bound on the kill rounds' wall time (`TOKEND_CRASH_SECONDS`, none by default): the run
    /// stops after the round that passes it and reports the rounds it did.
    static var secondsLimit: Int? { Int(ProcessInfo.processInfo.environment["TOKEND_CRASH_SECONDS"] ?? "") }

    static func run(grace: Int, credentials: Int = credentialCount, rounds: Int = rounds) async throws -> Outcome {
        try requireVenv()
        let directory = try ScratchDirectory()
        let idp = try IdentityProvider(directory: directory, options: .init(accessTokenLifetime: 3, refreshGrace: grace))
        try await idp.start()
        defer { Task { await idp.stop() } }
        try directory.write("idp-secret", IdentityProvider.clientSecret + "\n", mode: 0o600)
        let config = DaemonProcess.configuration(
            extraDaemon: "retry_initial = \"200ms\"\nretry_max = \"1s\"\nhttp_timeout = \"3s\"",
            providers: idp.providerConfiguration(name: "example", extra: "refresh_margin = \"1s\"\nrefresh_at = 0.5")
        )
        var daemon = try DaemonProcess(configuration: config, directory: directory)
        try await daemon.start()
        let client = try RawClient(path: daemon.socketPath)
        let minted = try await idp.mint(count: credentials, lifetime: 3)
        for (i, response) in minted.enumerated() {
            let reply = try client.call(
                Tokens.addCall(
                    user: "u\(i)", access: response["access_token"] as! String,
                    refresh: response["refresh_token"] as? String, expiresIn: 3))
            #expect(reply.errorName == nil)
        }
        let database = daemon.stateDirectory + "/tokend.sqlite"
        var inFlight = 0
        var unresolved: Set<String> = []
        var logs = ""
        var kills = 0
        let started = ContinuousClock.now
        for _ in 0..<rounds {
            if let limit = secondsLimit, ContinuousClock.now - started > .seconds(limit) { break }
            // Let refreshes run for a random while, then pull the plug.
            try await Task.sleep(for: .milliseconds(Int.random(in: 800...2500)))
            kill(daemon.process.processIdentifier, SIGKILL)
            daemon.process.waitUntilExit()
            kills += 1
            let marked = try await sqlite(database, "SELECT user_identifier FROM credentials WHERE grant_started_at IS NOT NULL")
                .split(separator: "\n").map(String.init)
            inFlight += marked.count
            unresolved.formUnion(marked)
            logs += daemon.log  // the next process starts a new log
            try? logs.write(toFile: directory.file("all-incarnations.log"), atomically: false, encoding: .utf8)
            daemon = try DaemonProcess(configuration: config, directory: directory)
            try await daemon.start()
        }
        let elapsed = Int((ContinuousClock.now - started).components.seconds)
        // Give the last start time to recover and refresh everything once more.
        try await Task.sleep(for: .seconds(5))
        let statusClient = try RawClient(path: daemon.socketPath)
        let status = try statusClient.call(#"{"method":"io.tokend.TokenProvider.Status"}"#)
        let listed = status.parameters["credentials"] as? [[String: Any]] ?? []
        let states = listed.map { $0["state"] as? String ?? "" }
        let lost = listed.filter { $0["state"] as? String == "reauthentication_required" }.map { $0["userIdentifier"] as? String ?? "?" }
        try await daemon.stop()
        logs += daemon.log
        let unanswered = logs.split(separator: "\n").filter { $0.contains("grant_outcome=unknown") }.compactMap { line in
            line.split(separator: " ").first { $0.hasPrefix("user_identifier=") }.map { String($0.dropFirst("user_identifier=".count)) }
        }
        unresolved.formUnion(unanswered)
        return Outcome(
            credentials: credentials, kills: kills, grantsInFlightAtKills: inFlight, grantsUnanswered: unanswered.count,
            reauthenticationRequired: states.filter { $0 == "reauthentication_required" }.count,
            lostWithoutCause: lost.filter { !unresolved.contains($0) }.sorted(),
            valid: states.filter { $0 == "valid" || $0 == "refreshing" || $0 == "retrying" }.count,
            integrity: try await sqlite(database, "PRAGMA integrity_check"),
            rows: Int(try await sqlite(database, "SELECT count(*) FROM credentials")) ?? -1,
            distinctUsers: Int(try await sqlite(database, "SELECT count(DISTINCT user_identifier) FROM credentials")) ?? -1,
            seconds: elapsed
        )
    }

    /// The grace must outlast a kill, a restart and the retry: 5 s did not when a second suite
    /// shared the two cores (two credentials retried their old refresh tokens after it).
    @Test func withTheServersReuseGraceNoCredentialIsLost() async throws {
        let outcome = try await Self.run(grace: 30)
        print("crash test (grace 30s): \(outcome)")
        #expect(outcome.integrity == "ok")
        #expect(outcome.rows == outcome.credentials, "no credential lost or duplicated")
        #expect(outcome.distinctUsers == outcome.rows)
        #expect(outcome.reauthenticationRequired == 0, "\(outcome)")
    }

    /// Without grace a rotated refresh token whose answer was lost cannot be used again: only
    /// credentials with a grant of unknown outcome (cut off by a kill, or unanswered) may be lost.
    @Test func withoutGraceOnlyGrantsWithAnUnknownOutcomeAreLost() async throws {
        let outcome = try await Self.run(grace: 0)
        print("crash test (grace 0): \(outcome)")
        #expect(outcome.integrity == "ok")
        #expect(outcome.rows == outcome.credentials)
        #expect(outcome.distinctUsers == outcome.rows)
        #expect(outcome.lostWithoutCause.isEmpty, "\(outcome)")
    }
}

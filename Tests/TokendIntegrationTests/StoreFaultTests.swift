import Foundation
import Testing

/// The refresh engine when its store fails for a while (another process holds the database's
/// write lock), against the real IdP. A suite of its own so that its long wait runs beside the
/// other suites.
@Suite(.serialized)
struct StoreFaultTests {
    @Test func aProactiveGrantTheStoreCouldNotRecordIsRetriedOnceItCan() async throws {
        // Refresh point at 15–20 % of a 60 s token (9–12 s), well before its end.
        let setup = try await IdPDaemon.start(providerExtra: "refresh_at = 0.2", daemonExtra: "retry_initial = \"1s\"")
        let client = try RawClient(path: setup.daemon.socketPath)
        let minted = try await setup.addMinted("alice", lifetime: 60, client: client)
        // Another process holds the database's write lock from now until 25 s, across the
        // refresh point: tokend's in-flight marker waits out its busy timeout (5 s) and fails,
        // so the proactive grant cannot start. The scheduler had already consumed the
        // credential's event; the failure must plan a new one, or the token would never be
        // refreshed.
        let database = setup.daemon.stateDirectory + "/tokend.sqlite"
        let lock = Task {
            try await runCommand("/usr/bin/sqlite3", [database, "BEGIN IMMEDIATE;", ".shell sleep 25", "ROLLBACK;"], timeout: .seconds(50))
        }
        let deadline = ContinuousClock.now + .seconds(50)
        var status: [String: Any] = [:]
        while ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(500))
            status = try OAuthRefreshTests.status(client, "alice")
            if (status["refreshCount"] as? Int ?? 0) >= 1, status["state"] as? String == "valid" { break }
        }
        let locked = try await lock.value
        #expect(locked.status == 0, "the lock was held: \(locked.stderr)")
        #expect(setup.daemon.log.contains("recording a grant failed"), "the marker's write failed while the lock was held")
        #expect(
            (status["refreshCount"] as? Int ?? 0) >= 1 && status["state"] as? String == "valid",
            "refreshed after the lock was released: \(status)")
        #expect(try client.call(Tokens.tokenCall(user: "alice")).accessToken != minted["access_token"] as? String)
        try await setup.stop()
    }
}

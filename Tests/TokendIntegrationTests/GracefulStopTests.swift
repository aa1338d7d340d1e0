import Foundation
import Testing

/// Stopping (SIGTERM) in the middle of a refresh storm: the grants already sent finish and are
/// stored; the ones still waiting for a grant slot do not start.
@Suite(.serialized)
struct GracefulStopTests {
    static let credentials = 10

    @Test func aStopDuringAStormFinishesTheGrantsSentAndStartsNoOther() async throws {
        // Two grants at a time, each held 3 s by the proxy: the whole storm would take 15 s,
        // well inside the 60 s shutdown_timeout, so a stop that waited for every queued grant
        // would refresh all of them.
        let (setup, proxy) = try await IdPDaemon.startBehindProxy(
            providerExtra: "refresh_at = 0.1",
            daemonExtra: "max_grants_in_flight = 2\nshutdown_timeout = \"60s\"\nhttp_timeout = \"20s\""
        )
        let client = try RawClient(path: setup.daemon.socketPath)
        try await proxy.set(["mode": "slow:3"])
        for index in 0..<Self.credentials {
            try await setup.addMinted("user-\(index)", lifetime: 20, client: client)
        }
        // Every credential is due 2 s after it was added: after 4 s all of them are, two grants
        // are at the proxy and the rest wait for a slot.
        try await Task.sleep(for: .seconds(4))
        let before = try await proxy.stats()["token_posts"] as? Int ?? 0
        #expect(before >= 1 && before < Self.credentials, "the storm is under way: \(before) POSTs")
        let status = try await setup.daemon.stop()
        #expect(status == 0)

        let posts = try await proxy.stats()["token_posts"] as? Int ?? -1
        let database = setup.daemon.stateDirectory + "/tokend.sqlite"
        let refreshes = Int(try await CrashRecoveryTests.sqlite(database, "SELECT sum(refresh_count) FROM credentials")) ?? -1
        let marked = Int(try await CrashRecoveryTests.sqlite(
            database, "SELECT count(*) FROM credentials WHERE state = 'refreshing' OR grant_started_at IS NOT NULL")) ?? -1
        #expect(refreshes == posts, "every grant sent was finished and stored: \(posts) POSTs, \(refreshes) refreshes")
        #expect(marked == 0, "no credential is left marked in flight")
        #expect(posts < Self.credentials, "the grants still queued at the stop did not start: \(posts) of \(Self.credentials)")
        #expect(setup.daemon.log.contains("stopping"))
        await setup.idp.stop()
        proxy.stop()
    }
}

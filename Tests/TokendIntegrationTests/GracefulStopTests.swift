import Foundation
import Testing

/// Stopping (SIGTERM) in the middle of a refresh storm: the grants already sent finish and are
/// stored; the ones still waiting for a grant slot do not start.
@Suite(.serialized)
struct GracefulStopTests {
    static let credentials = 10

    @Test func aStopDuringAStormFinishesTheGrantsSentAndStartsNoOther() async throws {
        // Two grants at a time, each held 5 s by the proxy: the whole storm would take 25 s,
        // well inside the 60 s shutdown_timeout, so a stop that waited for every queued grant
        // would refresh all of them.
        let (setup, proxy) = try await IdPDaemon.startBehindProxy(
            providerExtra: "refresh_at = 0.1",
            daemonExtra: "max_grants_in_flight = 2\nshutdown_timeout = \"60s\"\nhttp_timeout = \"20s\""
        )
        let client = try RawClient(path: setup.daemon.socketPath)
        try await proxy.set(["mode": "slow:5"])
        // Minted first, then added back to back, so all fall due together however slow the
        // machine is: 2 s after they were added (10 % of 20 s).
        try await setup.addMintedUsers(Self.credentials, client: client)
        let addedAt = ContinuousClock.now
        // Stop once every credential is due (two grants at the proxy, the rest waiting for a slot).
        while ContinuousClock.now < addedAt + .seconds(30) {
            let posts = try await proxy.stats()["token_posts"] as? Int ?? 0
            if posts >= 1, ContinuousClock.now >= addedAt + .seconds(3) { break }
            try await Task.sleep(for: .milliseconds(100))
        }
        let before = try await proxy.stats()["token_posts"] as? Int ?? 0
        #expect(before >= 1 && before < Self.credentials, "the storm is under way: \(before) POSTs")
        let status = try await setup.daemon.stop()
        #expect(status == 0)

        let posts = try await proxy.stats()["token_posts"] as? Int ?? -1
        let database = setup.daemon.stateDirectory + "/tokend.sqlite"
        let refreshes = Int(try await CrashRecoveryTests.sqlite(database, "SELECT sum(refresh_count) FROM credentials")) ?? -1
        let marked =
            Int(
                try await CrashRecoveryTests.sqlite(
                    database, "SELECT count(*) FROM credentials WHERE state = 'refreshing' OR grant_started_at IS NOT NULL")) ?? -1
        #expect(refreshes == posts, "every grant sent was finished and stored: \(posts) POSTs, \(refreshes) refreshes")
        #expect(marked == 0, "no credential is left marked in flight")
        #expect(posts < Self.credentials, "the grants still queued at the stop did not start: \(posts) of \(Self.credentials)")
        #expect(setup.daemon.log.contains("stopping"))
        await setup.idp.stop()
        proxy.stop()
    }
}

/// `max_grants_in_flight` is the limit on grants at once, also above AsyncHTTPClient's default
/// of 8 connections per host.
@Suite(.serialized)
struct GrantCapTests {
    @Test func twelveGrantsRunAtOnceWhenTheCapIsTwelve() async throws {
        let cap = 12
        let (setup, proxy) = try await IdPDaemon.startBehindProxy(
            providerExtra: "refresh_at = 0.1",
            daemonExtra: "max_grants_in_flight = \(cap)\nhttp_timeout = \"20s\""
        )
        let client = try RawClient(path: setup.daemon.socketPath)
        try await proxy.set(["mode": "slow:4"])
        try await setup.addMintedUsers(cap + 4, client: client)
        // All fall due 2 s after they were added; each grant is held 4 s at the proxy.
        let deadline = ContinuousClock.now + .seconds(30)
        var most = 0
        while ContinuousClock.now < deadline, most < cap {
            most = try await proxy.stats()["max_inflight"] as? Int ?? 0
            try await Task.sleep(for: .milliseconds(100))
        }
        #expect(most == cap, "\(cap) grants at once, no more: \(most)")
        _ = try await setup.daemon.stop()
        #expect(try await proxy.stats()["max_inflight"] as? Int ?? 0 <= cap, "the cap held")
        await setup.idp.stop()
        proxy.stop()
    }
}

extension IdPDaemon {
    /// Mints `count` credentials of 20 s at the IdP and adds them as `user-0`… back to back, so
    /// that they all fall due together however slow the machine is.
    func addMintedUsers(_ count: Int, client: RawClient) async throws {
        let minted = try await idp.mint(count: count, lifetime: 20)
        for (index, response) in minted.enumerated() {
            let reply = try client.call(
                Tokens.addCall(
                    user: "user-\(index)", access: response["access_token"] as! String, refresh: response["refresh_token"] as? String,
                    expiresIn: 20
                ))
            #expect(reply.errorName == nil, "\(reply)")
        }
    }
}

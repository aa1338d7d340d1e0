import Foundation
import Testing
import TokendTestSupport

/// A node that dies with a grant in flight: the other nodes take its credential over once its
/// lease lapses, on their own (no caller asks, and their own refresh point is minutes away),
/// and send the grant again with the same refresh token. Real PostgreSQL, two real nodes, the
/// real test IdP with reuse protection on; the fault proxy in front of the dying node holds its
/// grant, so that it never reaches the IdP. Grants are counted at the proxy and at the IdP.
@Suite(.serialized, .enabled(if: PostgresServer.isAvailable, "needs PostgreSQL 15 (scripts/setup-host.sh) and root"))
struct SharedStoreTakeOverTests {
    static let lease = Duration.seconds(5)

    @Test func aGrantInFlightOnAKilledNodeIsTakenOverWhenItsLeaseLapses() async throws {
        // Node 0 reaches the IdP through the proxy, node 1 directly. A lifetime of 600 s puts
        // node 1's own refresh point at least 270 s after the credential is added
        // (refresh_at 0.5, jitter at most 5 % of the lifetime).
        let fleet = try await SharedStoreTests.Fleet(count: 2, lifetime: 600, lease: "5s", slowFirstNode: true)
        let proxy = try #require(fleet.proxy)
        let addedAt = Date()
        let minted = try await fleet.add("alice", lifetime: 600)
        let old = minted["access_token"] as! String
        #expect(try await fleet.eventually(.seconds(10)) { try fleet.client(1).call(Tokens.tokenCall(user: "alice")).accessToken == old })
        let ownRefresh = try fleet.status(1, "alice").credentials.first?["nextRefreshAt"] as? Int ?? 0
        #expect(ownRefresh >= Int(addedAt.timeIntervalSince1970) + 270, "node 1's own refresh point: \(ownRefresh)")

        // Node 0 starts a grant (a caller needs more validity than the token has) and the proxy
        // holds it: node 0 has marked it durably and sent it, and no answer comes.
        let idpBefore = try await fleet.idp.postCount()
        try await proxy.resetStats()
        try await proxy.set(["mode": "hang", "times": 1, "path": "/o/token/"])
        let caller = try fleet.client(0)
        try caller.send(Tokens.tokenCall(user: "alice", minValid: 900))
        let sent = ContinuousClock.now + .seconds(10)
        while ContinuousClock.now < sent, (try await proxy.stats()["token_posts"] as? Int ?? 0) < 1 {
            try await Task.sleep(for: .milliseconds(20))
        }
        #expect(try await proxy.stats()["token_posts"] as? Int == 1, "node 0's grant reached the proxy: \(fleet.logs)")
        // Killed before its http_timeout (4 s) ends the grant.
        try await fleet.nodes[0].stop(signal: SIGKILL)
        let killed = ContinuousClock.now

        // Node 1 refreshes it within the lease and a few seconds, on its own.
        let bound = Self.lease + .seconds(6)
        var refreshed: [String: Any] = [:]
        let tookOver = try await fleet.eventually(bound) {
            refreshed = try fleet.status(1, "alice").credentials.first ?? [:]
            return (refreshed["refreshCount"] as? Int ?? 0) >= 1 && refreshed["state"] as? String == "valid"
        }
        let took = ContinuousClock.now - killed
        #expect(tookOver, "node 1 took the credential over within \(bound) of the kill: \(refreshed)\n\(fleet.logs)")
        #expect(took < .seconds(270), "long before node 1's own refresh point")
        let fresh = try fleet.client(1).call(Tokens.tokenCall(user: "alice")).accessToken
        #expect(fresh != nil && fresh != old, "node 1 serves the new token")

        // One grant each: node 0's, held at the proxy (it never reached the IdP), and node 1's,
        // sent again with the same refresh token, which the IdP (reuse protection on) accepted.
        #expect(try await proxy.stats()["token_posts"] as? Int == 1)
        #expect(try await fleet.idp.postCount() - idpBefore == 1, "one grant at the IdP: node 1's")
        let stored = try await fleet.database.psql(
            "SELECT state || ':' || refresh_count || ':' || (grant_started_at IS NULL) FROM tokend_credentials WHERE user_identifier = 'alice'"
        )
        #expect(stored == "valid:1:true", "stored once, marker cleared: \(stored)")
        await fleet.stop()
    }
}

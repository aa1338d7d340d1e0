import Foundation
import Testing
import TokendTestSupport

/// DPoP nonces at a token endpoint (RFC 9449 §8), with the fault proxy in front of the test IdP
/// answering `use_dpop_nonce` the way a server that wants nonces does, and the way no correct
/// server does (a new nonce every time). Proofs are counted and read at the proxy.
@Suite(.serialized)
struct DPoPFaultTests {
    /// One retry with the server's nonce; none after a second demand, or after a demand that
    /// gives no nonce; each failure a RefreshFailed that says which, within `call_timeout`.
    @Test func aDemandedNonceIsSentOnceAndAServerThatKeepsDemandingGetsNoThirdRequest() async throws {
        let (setup, proxy) = try await IdPDaemon.startBehindProxy(
            providerExtra: "dpop = true\ndpop_bind_on_refresh = true",
            daemonExtra: "call_timeout = \"5s\"\nretry_initial = \"30s\"\nforced_refresh_interval = \"1s\"")
        let client = try RawClient(path: setup.daemon.socketPath)
        let minted = try await setup.addMinted("alice", client: client)

        // A server that wants a nonce: one more request, carrying the nonce it gave.
        try await proxy.set(["mode": "dpop_nonce", "times": 1, "path": "/o/token/"])
        let refreshed = try client.call(Tokens.tokenCall(user: "alice", minValid: 7200))
        let fresh = try #require(refreshed.accessToken, "\(refreshed) \(setup.daemon.log.suffix(1500))")
        #expect(fresh != minted["access_token"] as? String)
        var stats = try await proxy.stats()
        let first = try #require(stats["dpop_nonces"] as? [Any], "\(stats)")
        #expect(stats["token_posts"] as? Int == 2 && first.count == 2, "\(stats)")
        #expect(first.first is NSNull, "the first proof had no nonce to carry")
        let given = try #require(first.last as? String, "the retry carries the server's nonce: \(stats)")

        // A server that refuses even its own nonce: one retry, then RefreshFailed, in time.
        try await Task.sleep(for: .milliseconds(1200))  // forced_refresh_interval
        try await proxy.resetStats()
        try await proxy.set(["mode": "dpop_nonce", "path": "/o/token/"])
        let started = ContinuousClock.now
        let refused = try client.call(Tokens.tokenCall(user: "alice", minValid: 7200))
        #expect(ContinuousClock.now - started < .seconds(5), "within call_timeout")
        #expect(refused.errorName == "io.tokend.TokenProvider.RefreshFailed", "\(refused)")
        #expect((refused.parameters["reason"] as? String)?.contains("DPoP nonce twice") == true, "\(refused)")
        stats = try await proxy.stats()
        let second = try #require(stats["dpop_nonces"] as? [Any], "\(stats)")
        #expect(stats["token_posts"] as? Int == 2, "no third request: \(stats)")
        #expect(second.first as? String == given, "the remembered nonce goes with the next grant at once")
        #expect(second.count == 2 && second.last as? String != given)
        // A demand without a nonce: nothing to retry with, and the reason says so.
        try await Task.sleep(for: .milliseconds(1200))
        try await proxy.resetStats()
        try await proxy.set(["mode": "dpop_nonce:none", "path": "/o/token/"])
        let without = try client.call(Tokens.tokenCall(user: "alice", minValid: 7200))
        #expect((without.parameters["reason"] as? String)?.contains("without a usable DPoP-Nonce") == true, "\(without)")
        #expect(try await proxy.stats()["token_posts"] as? Int == 1)
        // The token already held is still served.
        #expect(try client.call(Tokens.tokenCall(user: "alice")).accessToken == fresh)
        try await setup.stop()
        proxy.stop()
    }
}

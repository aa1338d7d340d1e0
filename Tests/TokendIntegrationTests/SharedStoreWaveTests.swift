import Foundation
import Testing
import TokendTestSupport

/// A refresh wave across nodes sharing a store, against the real test IdP with reuse protection
/// on (a refresh token spent twice revokes its whole family, so a double grant shows as
/// `reauthentication_required` and as an extra POST).
@Suite(.serialized, .enabled(if: PostgresServer.isAvailable, "needs PostgreSQL 15 (scripts/setup-host.sh) and root"))
struct SharedStoreWaveTests {
    /// 24 credentials fall due together on three nodes with two grant slots each, and every
    /// grant takes 2 s at the IdP: a node's last grants of the wave wait longer than the 6 s
    /// lease for a slot. Each credential is refreshed exactly once across the fleet, none needs
    /// a new login, and no node holds more leases than it has slots (it takes a lease when its
    /// grant can start, not when the credential falls due).
    @Test func aWaveLongerThanTheLeaseRefreshesEachCredentialOnce() async throws {
        let fleet = try await SharedStoreTests.Fleet(
            count: 3, lifetime: 40, daemonExtra: "max_grants_in_flight = 2", slowEveryNode: true,
            providerExtra: "refresh_at = 0.5\nrefresh_margin = \"1s\"\nrate_limit = 1000\nrate_burst = 1000")
        let users = (0..<24).map { "wave-\($0)" }
        let minted = try await fleet.idp.mint(count: users.count, lifetime: 40)
        for (user, tokens) in zip(users, minted) {
            let reply = try fleet.client(0).call(
                Tokens.addCall(
                    user: user, access: tokens["access_token"] as! String, refresh: tokens["refresh_token"] as? String, expiresIn: 40))
            #expect(reply.errorName == nil, "\(reply)")
        }
        try await fleet.proxy?.set(["mode": "slow:2"])
        let before = try await fleet.idp.postCount()
        // Due about 20 s after minting; the wave takes about 8 s. Bounded: 90 s.
        var mostLeases = 0
        let deadline = ContinuousClock.now + .seconds(90)
        while ContinuousClock.now < deadline {
            let held = try await fleet.database.psql(
                "SELECT coalesce(max(n), 0) FROM (SELECT count(*) AS n FROM tokend_leases WHERE holder IS NOT NULL "
                    + "AND expires_at > tokend_now_ms() GROUP BY holder) held")
            mostLeases = max(mostLeases, Int(held) ?? 0)
            let left = try await fleet.database.psql(
                "SELECT count(*) FROM tokend_credentials WHERE refresh_count = 0 OR state <> 'valid'")
            if left == "0" { break }
            try await Task.sleep(for: .milliseconds(100))
        }
        let states = try await fleet.database.psql(
            "SELECT string_agg(state || ':' || refresh_count, ',' ORDER BY user_identifier) FROM tokend_credentials")
        #expect(
            states.split(separator: ",").allSatisfy { $0 == "valid:1" },
            "every credential refreshed once and valid: \(states)\n\(fleet.logs)")
        let posts = try await fleet.idp.postCount() - before
        #expect(posts == users.count, "one grant per credential at the IdP: \(posts) for \(users.count)\n\(fleet.logs)")
        #expect(mostLeases <= 2, "a node held \(mostLeases) leases at once with 2 grant slots")
        await fleet.stop()
    }
}

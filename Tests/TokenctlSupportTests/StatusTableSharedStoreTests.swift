import Testing
import TokenctlSupport
import TokendClient
import TokendProtocol

/// `tokenctl status` for a node sharing a PostgreSQL store.
@Suite struct StatusTableSharedStoreTests {
    let now: Int64 = 1_700_000_000

    func credential(_ user: String, lease: String?) -> CredentialStatus {
        var status = CredentialStatus(
            userIdentifier: user, provider: "idp", state: "valid", expiresAt: now + 600, issuedAt: now - 60, sessionStartedAt: now - 60)
        status.leaseHolder = lease
        status.leaseExpiresAt = lease == nil ? nil : now + 25
        return status
    }

    @Test func showsNodesLeasesAndTheStoresHealth() throws {
        var daemon = DaemonStatus(version: "1.0", startedAt: now - 100, credentials: 2, valid: 2)
        daemon.store = "postgresql"
        daemon.node = "node-b"
        daemon.nodes = ["node-a", "node-b", "node-c"]
        let text = StatusTable.render(
            daemon: daemon, credentials: [credential("bob", lease: nil), credential("alice", lease: "node-a")], now: now)
        let lines = text.split(separator: "\n").map(String.init)
        #expect(lines[0].contains("store postgresql, node node-b of node-a, node-b, node-c"), "\(text)")
        #expect(!lines[0].contains("UNAVAILABLE"))
        try #require(lines.count >= 4, "\(text)")
        let header = lines[1]
        let lease = try #require(header.firstRange(of: "LEASE"), "\(text)")
        let lastError = try #require(header.firstRange(of: "LAST ERROR"), "\(text)")
        #expect(lease.lowerBound < lastError.lowerBound)
        #expect(lines[2].hasPrefix("alice") && lines[2].contains("node-a (25s)"), "\(text)")
        #expect(lines[3].hasPrefix("bob") && lines[3].contains(" - "), "\(text)")
    }

    @Test func saysWhenTheStoreIsUnavailable() {
        var daemon = DaemonStatus(version: "1.0", startedAt: now - 100, credentials: 1, valid: 1)
        daemon.store = "postgresql"
        daemon.node = "node-b"
        daemon.storeProblem = "the database is unreachable"
        let text = StatusTable.render(daemon: daemon, credentials: [credential("alice", lease: nil)], now: now)
        #expect(text.contains("STORE UNAVAILABLE (the database is unreachable), serving tokens from memory"), "\(text)")
    }

    @Test func aSingleHostShowsNoLeaseColumn() {
        let daemon = DaemonStatus(version: "1.0", startedAt: now - 100, credentials: 1, valid: 1)
        let text = StatusTable.render(daemon: daemon, credentials: [credential("alice", lease: nil)], now: now)
        #expect(!text.contains("LEASE"))
        #expect(!text.contains("store"))
    }

    @Test func theFieldsSurviveTheWire() throws {
        var daemon = DaemonStatus(version: "1.0", startedAt: 1)
        daemon.store = "postgresql"
        daemon.storeProblem = "down"
        daemon.node = "a"
        daemon.nodes = ["a", "b"]
        #expect(try DaemonStatus(json: daemon.json) == daemon)
        let status = credential("alice", lease: "b")
        #expect(try CredentialStatus(json: status.json) == status)
    }
}

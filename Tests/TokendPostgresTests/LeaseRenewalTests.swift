import Logging
import Testing
import TokendCore
import TokendPostgres
import TokendStorage
import TokendTestSupport

/// A grant's marker and the lease it is fenced by: no node sends a grant on a lease that ran out.
@Suite(.serialized, .enabled(if: PostgresServer.isAvailable, "needs PostgreSQL 15 (scripts/setup-host.sh) and root"))
struct LeaseRenewalTests {
    /// Waits (bounded: 30 s) until `user`'s lease in the database has run out.
    static func waitForExpiry(of user: String, _ server: PostgresServer) async throws {
        for _ in 0..<300 {
            let expired = try await server.psql(
                "SELECT count(*) FROM tokend_leases WHERE user_identifier = '\(user)' AND expires_at <= tokend_now_ms()")
            if expired == "1" { return }
            try await Task.sleep(for: .milliseconds(100))
        }
        Issue.record("the lease of \(user) did not run out within 30 s")
    }

    /// Node A takes Alice's lease, then waits longer than the lease lasts (its grant queued
    /// behind others, in a refresh wave) before marking the grant. Nobody has taken the lease
    /// over yet, so its counter still matches: A's marker used to be written, and A sent its
    /// grant while B, finding the lease run out, took it, read A's marker and sent a grant with
    /// the same refresh token — two grants for one credential. The marker now requires a lease
    /// still running (and renews it): A's is refused, B's goes through.
    @Test func aMarkerOnALeaseThatRanOutIsRefused() async throws {
        try await withServer { server in
            let a = try await Fixture.open(server, node: "a", leaseMilliseconds: 1_000)
            let b = try await Fixture.open(server, node: "b", leaseMilliseconds: 1_000)
            let coordinationA = PostgresRefreshCoordination(store: a, logger: Logger(label: "test.a"))
            let coordinationB = PostgresRefreshCoordination(store: b, logger: Logger(label: "test.b"))
            _ = try await a.insert(Fixture.credential("alice"), replacing: false)
            guard case .granted = await coordinationA.acquireLease("alice") else {
                Issue.record("a got no lease")
                return
            }
            try await Self.waitForExpiry(of: "alice", server)
            let now = Timestamp(millisecondsSince1970: 1_700_000_100_000)
            await #expect(throws: StorageError(code: .conflict, message: "")) {
                try await a.beginGrant(userIdentifier: "alice", startedAt: now, grouping: .zero) { _ in true }
            }
            #expect(try await server.psql("SELECT count(*) FROM tokend_credentials WHERE grant_started_at IS NOT NULL") == "0")
            guard case .granted = await coordinationB.acquireLease("alice") else {
                Issue.record("b could not take the lease that ran out")
                return
            }
            guard
                case .started(let marked)? = try await b.beginGrant(
                    userIdentifier: "alice", startedAt: now, grouping: .zero, shouldStart: { _ in true })
            else {
                Issue.record("b's marker was refused")
                return
            }
            #expect(marked.status.grantStartedAt == now)
            try await a.close()
            try await b.close()
        }
    }

    /// The marker renews the lease: from it on, the grant has a whole lease before another node
    /// may take the credential over.
    @Test func aMarkerRenewsItsLease() async throws {
        try await withServer { server in
            let a = try await Fixture.open(server, node: "a", leaseMilliseconds: 60_000)
            let coordination = PostgresRefreshCoordination(store: a, logger: Logger(label: "test.a"))
            _ = try await a.insert(Fixture.credential("alice"), replacing: false)
            guard case .granted(let lease) = await coordination.acquireLease("alice") else {
                Issue.record("a got no lease")
                return
            }
            // As if it had been taken 50 s ago: 10 s left.
            try await server.psql("UPDATE tokend_leases SET expires_at = tokend_now_ms() + 10000 WHERE user_identifier = 'alice'")
            _ = try await a.beginGrant(
                userIdentifier: "alice", startedAt: Timestamp(millisecondsSince1970: 1_700_000_100_000), grouping: .zero
            ) { _ in true }
            let left = Int64(
                try await server.psql("SELECT expires_at - tokend_now_ms() FROM tokend_leases WHERE user_identifier = 'alice'"))
            #expect((left ?? 0) > 50_000, "the lease has \(left ?? 0) ms left")
            #expect(try await server.psql("SELECT fencing FROM tokend_leases WHERE user_identifier = 'alice'") == "\(lease.fencing)")
            try await a.close()
        }
    }
}

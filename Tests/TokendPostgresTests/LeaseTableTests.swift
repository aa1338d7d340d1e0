import Testing
import TokendCore
import TokendStorage

@testable import TokendPostgres

/// The lease holders a node shows, from news that can arrive out of order.
struct LeaseTableTests {
    static let t0 = Timestamp(millisecondsSince1970: 1_000_000)

    /// A reconciliation read the lease while node b held it; b's release was heard before that
    /// read was merged. The release (a later fencing counter's news, or the same lease's) wins:
    /// Status does not show b holding a lease it gave back.
    @Test func aReadTakenBeforeAReleaseDoesNotBringTheLeaseBack() {
        var table = LeaseTable()
        table.note("alice", holder: "b", expiresAt: Self.t0 + .seconds(30), fencing: 7, now: Self.t0)
        table.note("alice", holder: nil, expiresAt: Self.t0 + .seconds(1), fencing: 7, now: Self.t0 + .seconds(1))
        table.merge(live: ["alice": ("b", Self.t0 + .seconds(30), 7)], now: Self.t0 + .seconds(2))
        #expect(table.holders(now: Self.t0 + .seconds(2)).isEmpty)
        // A newer lease (a larger counter) is news, whichever way it comes.
        table.merge(live: ["alice": ("c", Self.t0 + .seconds(40), 9)], now: Self.t0 + .seconds(3))
        #expect(table.holders(now: Self.t0 + .seconds(3))["alice"]?.holder == "c")
        table.note("alice", holder: "b", expiresAt: Self.t0 + .seconds(30), fencing: 8, now: Self.t0 + .seconds(4))
        #expect(table.holders(now: Self.t0 + .seconds(4))["alice"]?.holder == "c")
    }

    /// Expired leases and releases heard long ago are forgotten at the next reconciliation, so
    /// the table holds recent leases only (a refresh wave leases every credential).
    @Test func oldNewsIsForgotten() {
        var table = LeaseTable()
        table.note("alice", holder: "b", expiresAt: Self.t0 + .seconds(30), fencing: 1, now: Self.t0)
        table.note("bob", holder: nil, expiresAt: Self.t0, fencing: 2, now: Self.t0)
        table.merge(live: [:], now: Self.t0 + .seconds(31))
        #expect(table.known.keys.sorted() == ["bob"])
        table.merge(live: [:], now: Self.t0 + .seconds(61))
        #expect(table.known.isEmpty)
    }

    /// A lease is known, with its end, while a node holds it, also past that end (a node that
    /// died never releases it): that is when another node takes it over. Once released, or
    /// forgotten after it ended, none is known.
    @Test func aHeldLeaseIsKnownPastItsEndUntilReleasedOrForgotten() {
        var table = LeaseTable()
        table.note("alice", holder: "b", expiresAt: Self.t0 + .seconds(30), fencing: 1, now: Self.t0)
        #expect(table.lease(of: "alice") == LeaseHolder(holder: "b", expiresAt: Self.t0 + .seconds(30)))
        #expect(table.holders(now: Self.t0 + .seconds(31)).isEmpty)
        #expect(table.lease(of: "alice")?.holder == "b")
        table.merge(live: [:], now: Self.t0 + .seconds(31))
        #expect(table.lease(of: "alice") == nil)
        table.note("bob", holder: "b", expiresAt: Self.t0 + .seconds(30), fencing: 2, now: Self.t0)
        table.note("bob", holder: nil, expiresAt: Self.t0 + .seconds(1), fencing: 2, now: Self.t0 + .seconds(1))
        #expect(table.lease(of: "bob") == nil)
        #expect(table.lease(of: "carol") == nil)
    }
}

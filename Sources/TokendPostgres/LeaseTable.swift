import TokendCore
import TokendStorage

/// Who holds which credential's refresh lease, as a node last heard (for `Status`), from its own
/// leases, the change notifications and its reconciliations' reads of the lease table.
///
/// News can arrive out of order: a reconciliation's read, taken before a lease was released,
/// may be merged after the release's notification. Every lease carries its fencing counter,
/// which grows with every acquisition, so newer news always wins; a release is kept (as a
/// lease with no holder) until a reconciliation at least `releasedKeepMilliseconds` later, long
/// after any read that could predate it. Pure; the coordination keeps it behind a lock.
struct LeaseTable: Sendable {
    struct Known: Sendable, Equatable {
        var holder: String?
        var expiresAt: Timestamp
        var fencing: Int64
        /// When the release was heard (for a lease with no holder).
        var releasedAt: Timestamp?
    }

    private(set) var known: [String: Known] = [:]
    static let releasedKeepMilliseconds: Int64 = 60_000

    /// News of `user`'s lease: taken by `holder` until `expiresAt`, or released (`holder` nil).
    mutating func note(_ user: String, holder: String?, expiresAt: Timestamp, fencing: Int64, now: Timestamp) {
        if let current = known[user] {
            // Older news; or news of a lease already heard released (a lease is released once).
            if current.fencing > fencing || (current.fencing == fencing && current.holder == nil && holder != nil) { return }
        }
        known[user] = Known(holder: holder, expiresAt: expiresAt, fencing: fencing, releasedAt: holder == nil ? now : nil)
    }

    /// A reconciliation's read of the live leases: merged as news, and what has expired or was
    /// released long enough ago is forgotten (so the table holds recent leases only).
    mutating func merge(live: [String: (holder: String, expiresAt: Timestamp, fencing: Int64)], now: Timestamp) {
        known = known.filter { _, lease in
            if let releasedAt = lease.releasedAt { return (now - releasedAt).milliseconds < Self.releasedKeepMilliseconds }
            return lease.expiresAt > now
        }
        for (user, lease) in live { note(user, holder: lease.holder, expiresAt: lease.expiresAt, fencing: lease.fencing, now: now) }
    }

    /// The lease of `user` while a node holds it, also past its end; nil once released or unknown.
    func lease(of user: String) -> LeaseHolder? {
        guard let lease = known[user], let holder = lease.holder else { return nil }
        return LeaseHolder(holder: holder, expiresAt: lease.expiresAt)
    }

    /// The leases held now.
    func holders(now: Timestamp) -> [String: LeaseHolder] {
        var result: [String: LeaseHolder] = [:]
        for (user, lease) in known {
            guard let holder = lease.holder, lease.expiresAt > now else { continue }
            result[user] = LeaseHolder(holder: holder, expiresAt: lease.expiresAt)
        }
        return result
    }
}

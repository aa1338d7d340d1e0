import TokendCore
import TokendStorage

/// When a node looks at a credential another node is refreshing, and what it does then: a grant
/// cut off by that node's death is taken over as soon as its lease lapses, not when this node's
/// own refresh point comes (the jitter may put that most of a wave later) or a caller asks.
///
/// A node hears that another node took a credential's lease (a lease notification) and that it
/// marked a grant (the credential's row turns `refreshing`, a change notification). From then
/// on, while it knows that node holds the lease, it plans nothing for that credential but one
/// check just after the lease ends, in the
/// scheduler's own timetable (one heap, no task per credential: a wave may have a million in
/// flight). The holder's result replans the credential when it arrives, which drops the check.
/// At the check (``step(lease:now:)``):
///
/// - the holder renewed its lease: check again when the renewed lease ends (a live holder that
///   keeps renewing keeps the credential; every check waits for a later end, so this is no
///   loop);
/// - else a marked grant, whose outcome is unknown, is sent again with the refresh token the
///   store holds, as at start-up after a crash; an unmarked credential (the holder died before
///   it sent anything) is refreshed if its token is due for any node, and planned as usual if not
///   (``CredentialRegistry/isDueForAnyNode(_:provider:now:)``).
///
/// The decisions are pure; the lease as last heard comes from the coordination's lease table.
struct TakeOverCheck: Sendable {
    /// After a lease's end, so that the store, whose clock ends it, has let it go when this node
    /// asks for it.
    static let margin = Duration.milliseconds(250)

    let coordination: any RefreshCoordination

    /// What to do at a check.
    enum Step: Equatable {
        /// No live lease elsewhere: refresh (or send again) now, taking the lapsed lease.
        case takeOver
        /// The holder renewed its lease: look again then.
        case checkAgain(at: Timestamp)
    }

    /// When to look at a credential whose lease another node holds: when that lease, as last
    /// heard, ends.
    static func checkTime(_ lease: LeaseHolder) -> Timestamp { lease.expiresAt + margin }

    static func step(lease: LeaseHolder?, now: Timestamp) -> Step {
        guard let lease, lease.expiresAt + margin > now else { return .takeOver }
        return .checkAgain(at: lease.expiresAt + margin)
    }

    /// The lease of `user` as last heard, if another node holds it (its end may have passed).
    func leaseElsewhere(of user: String) -> LeaseHolder? {
        guard let lease = coordination.lease(of: user), lease.holder != coordination.nodeName else { return nil }
        return lease
    }

    func step(of user: String, now: Timestamp) -> Step { Self.step(lease: leaseElsewhere(of: user), now: now) }
}

extension CredentialRegistry {
    /// Other nodes took these credentials' leases: each is planned for a check when its lease
    /// ends (``TakeOverCheck``), unless this node refreshes it itself now. The lease table may
    /// have heard of a release since the news: then nothing is planned.
    func noteLeasesTakenElsewhere(_ users: some Sequence<String>) {
        guard let takeOver = gate.takeOver else { return }
        let providers = settings.current.providers
        for user in users {
            guard let entry = view[user], providers[entry.provider] != nil, entry.status.state != .reauthenticationRequired,
                grants.grantInFlight(of: user) == nil, let lease = takeOver.leaseElsewhere(of: user)
            else { continue }
            let due = TakeOverCheck.checkTime(lease)
            scheduler.retry(user, at: due)
            if wakeup.isNeeded(for: due) { wake() }
        }
    }
}

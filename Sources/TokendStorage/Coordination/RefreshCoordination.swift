import TokendCore

/// A node's right to refresh one credential, taken in the shared store before a grant.
///
/// `fencing` grows with every acquisition of any lease in the store: a write made under a lease
/// is accepted only while the lease still carries the same counter, so a node whose lease was
/// taken over (it stalled, or lost the database) can never overwrite the newer holder's token.
public struct RefreshLease: Sendable, Hashable {
    public var userIdentifier: String
    /// The node that holds it (`daemon.node_name`).
    public var holder: String
    public var fencing: Int64
    /// When other nodes may take it over (the database's clock).
    public var expiresAt: Timestamp
    /// The credential's generation in the store when the lease was taken (nil: not known, or
    /// no such credential): a node whose view holds that very generation has nothing to adopt.
    public var storedGeneration: Int64?

    public init(userIdentifier: String, holder: String, fencing: Int64, expiresAt: Timestamp, storedGeneration: Int64? = nil) {
        self.userIdentifier = userIdentifier
        self.holder = holder
        self.fencing = fencing
        self.expiresAt = expiresAt
        self.storedGeneration = storedGeneration
    }
}

/// The answer to a request for a refresh lease.
public enum LeaseDecision: Sendable, Hashable {
    /// This node may refresh; release the lease when the result is stored.
    case granted(RefreshLease)
    /// Another node is refreshing; wait for its result (or for `expiresAt`, when the lease may be
    /// taken over if that node died).
    case heldElsewhere(holder: String, expiresAt: Timestamp)
    /// The store cannot be reached; nothing may be refreshed until it can.
    case unavailable(reason: String)
}

/// Who holds a lease, for `Status`.
public struct LeaseHolder: Sendable, Hashable {
    public var holder: String
    public var expiresAt: Timestamp

    public init(holder: String, expiresAt: Timestamp) {
        self.holder = holder
        self.expiresAt = expiresAt
    }
}

/// Whether the credential store answers, for `Status` and `STATUS=`.
public struct StoreHealth: Sendable, Hashable {
    /// `sqlite` or `postgresql`.
    public var kind: String
    /// `nil` while the store answers; else a one-line, secret-free reason.
    public var problem: String?
    /// When the current problem started.
    public var since: Timestamp?

    public init(kind: String, problem: String? = nil, since: Timestamp? = nil) {
        self.kind = kind
        self.problem = problem
        self.since = since
    }

    public var isAvailable: Bool { problem == nil }
}

/// Decides which node refreshes a credential when several daemons share one store.
///
/// The registry asks for a lease before every grant and releases it after the result is stored.
/// A single-host store needs no coordination: ``LocalRefreshCoordination`` grants every request
/// at once (the registry's own single flight already makes one grant per credential).
public protocol RefreshCoordination: Sendable {
    /// This node's name when the store is shared, `nil` for a single host.
    var nodeName: String? { get }

    /// Takes the refresh lease of `userIdentifier`, if no other node holds a live one.
    func acquireLease(_ userIdentifier: String) async -> LeaseDecision

    /// Gives a lease back (best effort: an unreleased lease simply expires).
    func releaseLease(_ lease: RefreshLease) async

    /// Returns when another node's result for `userIdentifier` has been applied here (a change
    /// notification was handled), when its lease was released, or at `deadline`, whichever is first.
    func waitForChange(of userIdentifier: String, until deadline: Timestamp) async

    /// The store's health now.
    func health() -> StoreHealth

    /// The live leases as last seen, by user identifier.
    func leaseHolders() -> [String: LeaseHolder]

    /// The lease of `userIdentifier` as last heard, while a node holds it: its end may have
    /// passed (a node that died never releases its leases). Nil once released, or if none is known.
    func lease(of userIdentifier: String) -> LeaseHolder?

    /// How long a lease lasts from when it is taken or renewed.
    var leaseDuration: Duration { get }

    /// The nodes seen recently, sorted.
    func nodes() -> [String]
}

/// The coordination of a store only one daemon uses: every lease is granted at once.
public struct LocalRefreshCoordination: RefreshCoordination {
    public init() {}
    public var nodeName: String? { nil }

    public func acquireLease(_ userIdentifier: String) async -> LeaseDecision {
        .granted(RefreshLease(userIdentifier: userIdentifier, holder: "", fencing: 0, expiresAt: Timestamp(millisecondsSince1970: .max)))
    }

    public func releaseLease(_ lease: RefreshLease) async {}
    public func waitForChange(of userIdentifier: String, until deadline: Timestamp) async {}
    public func health() -> StoreHealth { StoreHealth(kind: "sqlite") }
    public func leaseHolders() -> [String: LeaseHolder] { [:] }
    public func lease(of userIdentifier: String) -> LeaseHolder? { nil }
    public var leaseDuration: Duration { .zero }
    public func nodes() -> [String] { [] }
}

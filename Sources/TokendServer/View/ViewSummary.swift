import TokendCore

/// The daemon's counts over every credential in the view — by state as a caller would see it
/// now, and the next planned refresh — kept as entries come and go, so that `Status` and
/// `STATUS=` never walk a million credentials to say how many there are.
///
/// A stored `valid` credential past its deadline reads as `expired` (``ViewEntry/effectiveState(now:)``):
/// the deadlines of valid credentials are kept in ``PassedTimes``, which counts those at or
/// before now as now moves. Pure and not thread-safe: ``CredentialView`` keeps it behind a lock.
struct ViewSummary: Sendable {
    /// Credentials by their stored state.
    private var stored: [CredentialState: Int] = [:]
    /// The deadlines of the credentials stored as `valid`.
    private var validDeadlines = PassedTimes()
    /// The planned refreshes.
    private var nextRefreshes = EarliestTimes()
    private(set) var count = 0

    /// What ``counts(now:)`` reports.
    struct Counts: Sendable, Equatable {
        var credentials = 0
        var valid = 0
        var refreshing = 0
        var retrying = 0
        var reauthenticationRequired = 0
        var expired = 0
        var nextRefreshAt: Timestamp?
    }

    mutating func add(_ entry: ViewEntry) {
        count += 1
        stored[entry.status.state, default: 0] += 1
        if entry.status.state == .valid { validDeadlines.insert(entry.deadline.millisecondsSince1970) }
        if let next = entry.nextRefreshAt { nextRefreshes.insert(next.millisecondsSince1970) }
    }

    mutating func remove(_ entry: ViewEntry) {
        count -= 1
        stored.decrementCount(entry.status.state)
        if entry.status.state == .valid { validDeadlines.remove(entry.deadline.millisecondsSince1970) }
        if let next = entry.nextRefreshAt { nextRefreshes.remove(next.millisecondsSince1970) }
    }

    /// The counts as of `now`: what walking every entry's ``ViewEntry/effectiveState(now:)`` and
    /// `nextRefreshAt` would give.
    mutating func counts(now: Timestamp) -> Counts {
        let pastDeadline = validDeadlines.count(atOrBefore: now.millisecondsSince1970)
        return Counts(
            credentials: count, valid: stored[.valid, default: 0] - pastDeadline, refreshing: stored[.refreshing, default: 0],
            retrying: stored[.retrying, default: 0], reauthenticationRequired: stored[.reauthenticationRequired, default: 0],
            expired: stored[.expired, default: 0] + pastDeadline,
            nextRefreshAt: nextRefreshes.earliest().map { Timestamp(millisecondsSince1970: $0) })
    }

    /// The same counts over `entries`, walking them: for a caller who sees only some credentials.
    static func counts(of entries: some Sequence<ViewEntry>, now: Timestamp) -> Counts {
        var counts = Counts()
        for entry in entries {
            counts.credentials += 1
            switch entry.effectiveState(now: now) {
            case .valid: counts.valid += 1
            case .refreshing: counts.refreshing += 1
            case .retrying: counts.retrying += 1
            case .reauthenticationRequired: counts.reauthenticationRequired += 1
            case .expired: counts.expired += 1
            }
            if let next = entry.nextRefreshAt, next < (counts.nextRefreshAt ?? next + .seconds(1)) { counts.nextRefreshAt = next }
        }
        return counts
    }
}

/// Which credentials each uid, group or program could read, by the reader lists alone, so that
/// `Status` for someone who is not an administrator looks at the credentials they might see
/// instead of every credential. A superset: the caller's access is still checked on each
/// (program readers need the caller's program). Covers every way ``AccessPolicy/readDecision(_:readers:program:)``
/// grants: a uid reader, a group reader, a program reader joined to a uid, or one for any uid.
struct ReaderIndex: Sendable {
    private var byUID: [UInt32: Set<String>] = [:]
    private var byGID: [UInt32: Set<String>] = [:]
    /// Credentials with a program reader joined to no uid: anyone running that program.
    private var anyUID: Set<String> = []

    mutating func add(_ user: String, _ readers: ResolvedReaders) {
        for uid in Self.uids(readers) { byUID[uid, default: []].insert(user) }
        for gid in readers.gids { byGID[gid, default: []].insert(user) }
        if readers.programs.contains(where: { $0.uid == nil }) { anyUID.insert(user) }
    }

    mutating func remove(_ user: String, _ readers: ResolvedReaders) {
        for uid in Self.uids(readers) { Self.drop(user, from: &byUID, uid) }
        for gid in readers.gids { Self.drop(user, from: &byGID, gid) }
        if readers.programs.contains(where: { $0.uid == nil }) { anyUID.remove(user) }
    }

    /// The credentials `caller` might read.
    func candidates(for caller: CallerIdentity) -> Set<String> {
        var result = byUID[caller.uid] ?? []
        for gid in Set([caller.gid] + caller.supplementaryGroups) { result.formUnion(byGID[gid] ?? []) }
        result.formUnion(anyUID)
        return result
    }

    private static func uids(_ readers: ResolvedReaders) -> Set<UInt32> {
        readers.uids.union(readers.programs.compactMap(\.uid))
    }

    private static func drop(_ user: String, from index: inout [UInt32: Set<String>], _ key: UInt32) {
        index[key]?.remove(user)
        if index[key]?.isEmpty == true { index[key] = nil }
    }
}

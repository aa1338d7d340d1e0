import Dispatch
import Synchronization
import TokendCore

/// The in-memory view of every credential, read synchronously by the event loops.
///
/// Not an actor on purpose: a cached, valid token is answered inside the channel pipeline with
/// no hop into Swift concurrency (PLATFORM-NOTES.md measured ~142k vs ~26k round trips/s). The
/// map is split into shards, each behind its own `Mutex`, so readers on different event loops
/// rarely contend. Entries are immutable; only the registry writes, and only after the store's
/// durable write.
final class CredentialView: Sendable {
    private final class Shard: Sendable {
        let entries = Mutex<[String: ViewEntry]>([:])
    }

    private let shards: [Shard]
    /// Credentials held per uid alone (``heldUID(_:)``), kept as entries come and go so that
    /// quota checks and `Status` never count the whole view.
    private let held = Mutex<[UInt32: Int]>([:])
    /// The counts `Status` and `STATUS=` report, and who might read what, kept as entries come
    /// and go (changed under the entry's shard lock, so they always match the entries).
    private let summary = Mutex(Summary())
    /// How many credentials have a program reader: while none has, connections do not trace who
    /// writes each call (``CallSenders``), which costs work on every message.
    let programReaders = ProgramReaderPresence()
    /// Told about every change of token or of serving state, for `Watch` and token files.
    let hub = WatchHub()
    /// Re-login warnings, for `WatchReloginWarnings`.
    let reloginHub = ReloginWarningHub()
    /// Told about every change at all (state, plan, count), for `STATUS=` and the metrics file.
    let changes = ChangeSignal()
    /// The DPoP keys of credentials programs asked proofs for; they go with their credential.
    let dpopKeys = DPoPKeyCache()
    /// The narrowed tokens programs asked for; they go with their credential.
    let narrowedTokens = NarrowedTokenCache()

    init(shardCount: Int = 16) {
        shards = (0..<max(1, shardCount)).map { _ in Shard() }
    }

    private func shard(for userIdentifier: String) -> Shard {
        shards[Int(UInt(bitPattern: userIdentifier.hashValue) % UInt(shards.count))]
    }

    subscript(userIdentifier: String) -> ViewEntry? {
        shard(for: userIdentifier).entries.withLock { $0[userIdentifier] }
    }

    func store(_ entry: ViewEntry) {
        let old = shard(for: entry.userIdentifier).entries.withLock { entries in
            defer { entries[entry.userIdentifier] = entry }
            let old = entries[entry.userIdentifier]
            countHeld(removing: old, adding: entry)
            summary.withLock { $0.replace(old, with: entry) }
            return old
        }
        countProgramReaders(removing: old, adding: entry)
        if let old, old.enrolment != entry.enrolment {
            dpopKeys.forget(entry.userIdentifier)
            narrowedTokens.forget(entry.userIdentifier)
        }
        notifyChange(from: old, to: entry)
        changes.signal()
    }

    func remove(_ userIdentifier: String) {
        let old = shard(for: userIdentifier).entries.withLock { entries in
            let old = entries.removeValue(forKey: userIdentifier)
            countHeld(removing: old, adding: nil)
            summary.withLock { $0.replace(old, with: nil) }
            return old
        }
        countProgramReaders(removing: old, adding: nil)
        dpopKeys.forget(userIdentifier)
        narrowedTokens.forget(userIdentifier)
        if old != nil { hub.publish(userIdentifier, .removed) }
        changes.signal()
    }

    /// The uid a credential is held for alone (its only reader), if any: what counts against
    /// ``UserQuotas/credentialsPerUID``.
    private static func heldUID(_ entry: ViewEntry?) -> UInt32? {
        guard let entry, entry.readers.count == 1, case .uid(let uid) = entry.readers[0] else { return nil }
        return uid
    }

    private func countHeld(removing old: ViewEntry?, adding new: ViewEntry?) {
        let before = Self.heldUID(old)
        let after = Self.heldUID(new)
        guard before != after else { return }
        held.withLock { held in
            if let before {
                held.decrementCount(before)
            }
            if let after { held[after, default: 0] += 1 }
        }
    }

    private func countProgramReaders(removing old: ViewEntry?, adding new: ViewEntry?) {
        programReaders.add(
            (new?.resolvedReaders.programs.isEmpty == false ? 1 : 0) - (old?.resolvedReaders.programs.isEmpty == false ? 1 : 0))
    }

    /// Watchers hear about a new token or the end of the login; bookkeeping changes (state
    /// `refreshing`, a retry planned) are not news to them.
    private func notifyChange(from old: ViewEntry?, to new: ViewEntry) {
        if new.status.state == .reauthenticationRequired {
            if old?.status.state != .reauthenticationRequired {
                hub.publish(new.userIdentifier, .reauthenticationRequired(reason: new.status.lastError ?? "the login has ended"))
            }
        } else if let old {
            // Tokens are compared only when someone listens, and not at all when the entry was
            // rebuilt around the same token, so a token loaded sealed is not opened for this.
            guard hub.hasSubscribers(new.userIdentifier) else { return }
            if old.deadline != new.deadline || (!old.token.isKnownSame(as: new.token) && old.accessToken != new.accessToken) {
                hub.publish(new.userIdentifier, .updated(new))
            }
        } else {
            hub.publish(new.userIdentifier, .updated(new))
        }
    }

    /// Replaces every entry at once (start-up and reload).
    func replaceAll(with entries: [ViewEntry]) {
        let (grouped, built) = Self.group(entries, shardCount: shards.count)
        var counts: [UInt32: Int] = [:]
        for entry in entries { if let uid = Self.heldUID(entry) { counts[uid, default: 0] += 1 } }
        held.withLock { $0 = counts }
        // Only start-up replaces every entry, before the socket listens: nobody sees the counts
        // ahead of the entries.
        summary.withLock { $0 = built }
        programReaders.reset(to: entries.count { !$0.resolvedReaders.programs.isEmpty })
        dpopKeys.removeAll()
        narrowedTokens.removeAll()
        for (index, shard) in shards.enumerated() {
            let newEntries = grouped[index]
            let old = shard.entries.withLock { entries in
                defer { entries = newEntries }
                return entries
            }
            // Nobody can watch before the socket listens: start-up skips the per-entry lookups.
            guard !hub.isEmpty else { continue }
            for (user, entry) in newEntries { notifyChange(from: old[user], to: entry) }
            for user in old.keys where newEntries[user] == nil { hub.publish(user, .removed) }
        }
        changes.signal()
    }

    /// The entries by shard, each shard's table built on its own thread (start-up builds tables
    /// of a million entries; the shards are independent), and their summary, built beside them.
    private static func group(_ entries: [ViewEntry], shardCount: Int) -> ([[String: ViewEntry]], Summary) {
        let shardOf = entries.map { Int(UInt(bitPattern: $0.userIdentifier.hashValue) % UInt(shardCount)) }
        let capacity = entries.count / shardCount + entries.count / 64 + 16
        let built = Mutex(Array(repeating: [String: ViewEntry](), count: shardCount))
        let summary = Mutex(Summary())
        let build: @Sendable (Int) -> Void = { shard in
            guard shard < shardCount else {
                let made = Summary(entries)
                summary.withLock { $0 = made }
                return
            }
            var table = [String: ViewEntry](minimumCapacity: capacity)
            for index in shardOf.indices where shardOf[index] == shard { table[entries[index].userIdentifier] = entries[index] }
            built.withLock { $0[shard] = table }
        }
        if entries.count < 10_000 {
            for shard in 0...shardCount { build(shard) }
        } else {
            DispatchQueue.concurrentPerform(iterations: shardCount + 1, execute: build)
        }
        return (built.withLock { $0 }, summary.withLock { $0 })
    }

    /// ``ViewSummary`` and ``ReaderIndex`` together, changed as one.
    private struct Summary: Sendable {
        var counts = ViewSummary()
        var readers = ReaderIndex()

        init() {}

        init(_ entries: [ViewEntry]) {
            for entry in entries { replace(nil, with: entry) }
        }

        mutating func replace(_ old: ViewEntry?, with new: ViewEntry?) {
            if let old { counts.remove(old) }
            if let new { counts.add(new) }
            // A refresh keeps the readers: the index changes only when they do.
            if let old, let new, old.resolvedReaders == new.resolvedReaders { return }
            if let old { readers.remove(old.userIdentifier, old.resolvedReaders) }
            if let new { readers.add(new.userIdentifier, new.resolvedReaders) }
        }
    }

    /// The daemon's counts over every credential, as of `now`, without walking them.
    func counts(now: Timestamp) -> ViewSummary.Counts {
        summary.withLock { $0.counts.counts(now: now) }
    }

    /// The entries `caller` might read, by their reader lists (a superset: check each), without
    /// walking every credential; in no particular order.
    func entriesPossiblyReadable(by caller: CallerIdentity) -> [ViewEntry] {
        let users = summary.withLock { $0.readers.candidates(for: caller) }
        return users.compactMap { self[$0] }
    }

    var count: Int { shards.reduce(0) { total, shard in total + shard.entries.withLock { $0.count } } }

    /// A snapshot of all entries in no particular order: for counting, where sorting a large
    /// view would cost more than everything else.
    func unsortedSnapshot() -> [ViewEntry] {
        var all: [ViewEntry] = []
        all.reserveCapacity(count)
        for shard in shards { shard.entries.withLock { all.append(contentsOf: $0.values) } }
        return all
    }

    /// How many credentials are held for `uid` alone (their only reader), leaving out
    /// `excluding`: what counts against ``UserQuotas/credentialsPerUID``.
    func countHeld(by uid: UInt32, excluding: String? = nil) -> Int {
        let all = held.withLock { $0[uid, default: 0] }
        guard let excluding, Self.heldUID(self[excluding]) == uid else { return all }
        return all - 1
    }

    /// A snapshot of all entries, sorted by user identifier (for `Status`).
    func snapshot() -> [ViewEntry] {
        var all: [ViewEntry] = []
        for shard in shards { shard.entries.withLock { all.append(contentsOf: $0.values) } }
        all.sort { $0.userIdentifier < $1.userIdentifier }
        return all
    }
}

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
    /// Told about every change of token or of serving state, for `Watch` and token files.
    let hub = WatchHub()
    /// Told about every change at all (state, plan, count), for `STATUS=` and the metrics file.
    let changes = ChangeSignal()

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
            return entries[entry.userIdentifier]
        }
        notifyChange(from: old, to: entry)
        changes.signal()
    }

    func remove(_ userIdentifier: String) {
        let old = shard(for: userIdentifier).entries.withLock { $0.removeValue(forKey: userIdentifier) }
        if old != nil { hub.publish(userIdentifier, .removed) }
        changes.signal()
    }

    /// Watchers hear about a new token or the end of the login; bookkeeping changes (state
    /// `refreshing`, a retry planned) are not news to them.
    private func notifyChange(from old: ViewEntry?, to new: ViewEntry) {
        if new.status.state == .reauthenticationRequired {
            if old?.status.state != .reauthenticationRequired {
                hub.publish(new.userIdentifier, .reauthenticationRequired(reason: new.status.lastError ?? "the login has ended"))
            }
        } else if old?.accessToken != new.accessToken || old?.deadline != new.deadline {
            hub.publish(new.userIdentifier, .updated(new))
        }
    }

    /// Replaces every entry at once (start-up and reload).
    func replaceAll(with entries: [ViewEntry]) {
        var grouped = Array(repeating: [String: ViewEntry](), count: shards.count)
        for entry in entries {
            grouped[Int(UInt(bitPattern: entry.userIdentifier.hashValue) % UInt(shards.count))][entry.userIdentifier] = entry
        }
        for (index, shard) in shards.enumerated() {
            let newEntries = grouped[index]
            let old = shard.entries.withLock { entries in
                defer { entries = newEntries }
                return entries
            }
            for (user, entry) in newEntries { notifyChange(from: old[user], to: entry) }
            for user in old.keys where newEntries[user] == nil { hub.publish(user, .removed) }
        }
        changes.signal()
    }

    var count: Int { shards.reduce(0) { total, shard in total + shard.entries.withLock { $0.count } } }

    /// A snapshot of all entries, sorted by user identifier (for `Status`).
    func snapshot() -> [ViewEntry] {
        var all: [ViewEntry] = []
        for shard in shards { shard.entries.withLock { all.append(contentsOf: $0.values) } }
        all.sort { $0.userIdentifier < $1.userIdentifier }
        return all
    }
}

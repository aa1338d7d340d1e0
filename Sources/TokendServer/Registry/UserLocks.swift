import TokendCore

/// Serialises the writes of one credential (add, remove, committing a refresh) without holding
/// up other credentials. Used only from inside the registry actor, so it needs no lock of its own.
struct UserLocks {
    private var waiters: [String: [CheckedContinuation<Void, Never>]] = [:]

    /// Returns `true` when the lock was free and is now held; otherwise the caller must wait
    /// with `enqueue` and owns the lock when resumed.
    mutating func tryAcquire(_ user: String) -> Bool {
        if waiters[user] != nil { return false }
        waiters[user] = []
        return true
    }

    mutating func enqueue(_ user: String, _ continuation: CheckedContinuation<Void, Never>) {
        waiters[user, default: []].append(continuation)
    }

    /// Hands the lock to the next waiter, or frees it.
    mutating func release(_ user: String) {
        guard var queue = waiters[user] else { return }
        if queue.isEmpty {
            waiters.removeValue(forKey: user)
        } else {
            let next = queue.removeFirst()
            waiters[user] = queue
            next.resume()
        }
    }
}

/// A counting semaphore for grants in flight, used from inside the registry actor.
///
/// Grants that wait for a slot queue per credential owner and are handed slots in turn
/// (``RoundRobinQueue``): a local user with thousands of due or failing credentials cannot keep
/// another user's grants waiting behind all of theirs.
struct GrantSlots {
    var limit: Int
    private(set) var inUse = 0
    /// The most grants ever in flight at once (reported in status and benchmarks).
    private(set) var highWater = 0
    private var waiters = RoundRobinQueue<CredentialOwner, CheckedContinuation<Void, Never>>()

    init(limit: Int) { self.limit = max(1, limit) }

    /// Takes a free slot, unless grants already wait for one (they go first).
    mutating func tryAcquire() -> Bool {
        guard inUse < limit, waiters.isEmpty else { return false }
        inUse += 1
        highWater = max(highWater, inUse)
        return true
    }

    mutating func enqueue(_ continuation: CheckedContinuation<Void, Never>, owner: CredentialOwner) {
        waiters.append(continuation, for: owner)
    }

    /// Frees a slot and hands the free slots to the next waiters in turn: one, or more when
    /// a reload raised the limit, none while it is lowered below the slots in use.
    mutating func release() {
        inUse -= 1
        while inUse < limit, let next = waiters.next() {
            inUse += 1
            highWater = max(highWater, inUse)
            next.resume()
        }
    }
}

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
struct GrantSlots {
    var limit: Int
    private(set) var inUse = 0
    /// The most grants ever in flight at once (reported in status and benchmarks).
    private(set) var highWater = 0
    /// Waiting grants, oldest first from `head`: a refresh storm queues thousands, and
    /// `removeFirst` on an array would move all of them for every slot handed on.
    private var waiters: [CheckedContinuation<Void, Never>] = []
    private var head = 0

    init(limit: Int) { self.limit = max(1, limit) }

    mutating func tryAcquire() -> Bool {
        guard inUse < limit else { return false }
        inUse += 1
        highWater = max(highWater, inUse)
        return true
    }

    mutating func enqueue(_ continuation: CheckedContinuation<Void, Never>) { waiters.append(continuation) }

    mutating func release() {
        if head < waiters.count, inUse <= limit {
            // The slot passes straight to the next waiter.
            let next = waiters[head]
            head += 1
            if head == waiters.count {
                waiters.removeAll(keepingCapacity: true)
                head = 0
            } else if head >= 1024, head * 2 >= waiters.count {
                waiters.removeFirst(head)
                head = 0
            }
            next.resume()
        } else {
            inUse -= 1
        }
    }
}

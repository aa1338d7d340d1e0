/// When each credential is next due for a refresh: a binary min-heap of due times.
///
/// Rescheduling a user does not search the heap: the new time is recorded in `dueTimes` and the
/// stale heap entry is skipped when it surfaces (lazy deletion), so every operation is
/// O(log n) and nothing ever walks all credentials. With nothing due, nothing runs.
public struct RefreshSchedule: Sendable {
    private struct Item: Sendable {
        var due: Timestamp
        var userIdentifier: String
    }

    private var heap: [Item] = []
    private var dueTimes: [String: Timestamp] = [:]

    public init() {}

    /// How many users have a refresh scheduled.
    public var count: Int { dueTimes.count }

    /// The earliest due time, if any.
    public var nextDue: Timestamp? {
        mutating get {
            dropStale()
            return heap.first?.due
        }
    }

    public func dueTime(of userIdentifier: String) -> Timestamp? { dueTimes[userIdentifier] }

    /// Schedules `userIdentifier` at `due`, replacing any earlier plan for it.
    public mutating func schedule(_ userIdentifier: String, at due: Timestamp) {
        dueTimes[userIdentifier] = due
        push(Item(due: due, userIdentifier: userIdentifier))
        // Stale entries are dropped lazily; compact when they dominate so memory stays O(users).
        if heap.count > 2 * dueTimes.count + 64 { rebuild() }
    }

    /// Schedules many users at once (start-up): the table sized up front and the heap built in
    /// one pass, instead of one push each. Replaces earlier plans of the same users.
    public mutating func schedule(contentsOf items: [(userIdentifier: String, due: Timestamp)]) {
        dueTimes.reserveCapacity(dueTimes.count + items.count)
        for item in items { dueTimes[item.userIdentifier] = item.due }
        rebuild()
    }

    public mutating func cancel(_ userIdentifier: String) {
        dueTimes.removeValue(forKey: userIdentifier)
    }

    /// Removes and returns every user due at or before `now`, earliest first.
    public mutating func popDue(now: Timestamp, limit: Int = .max) -> [String] {
        var due: [String] = []
        while due.count < limit, let first = heap.first, first.due <= now {
            pop()
            if dueTimes[first.userIdentifier] == first.due {
                dueTimes.removeValue(forKey: first.userIdentifier)
                due.append(first.userIdentifier)
            }
        }
        return due
    }

    private mutating func dropStale() {
        while let first = heap.first, dueTimes[first.userIdentifier] != first.due { pop() }
    }

    private mutating func rebuild() {
        heap = dueTimes.map { Item(due: $0.value, userIdentifier: $0.key) }
        guard heap.count > 1 else { return }
        for index in stride(from: heap.count / 2 - 1, through: 0, by: -1) { siftDown(index) }
    }

    private mutating func push(_ item: Item) {
        heap.append(item)
        var child = heap.count - 1
        while child > 0 {
            let parent = (child - 1) / 2
            guard heap[child].due < heap[parent].due else { break }
            heap.swapAt(child, parent)
            child = parent
        }
    }

    private mutating func pop() {
        heap.swapAt(0, heap.count - 1)
        heap.removeLast()
        if !heap.isEmpty { siftDown(0) }
    }

    private mutating func siftDown(_ start: Int) {
        var parent = start
        while true {
            let left = 2 * parent + 1
            let right = left + 1
            var smallest = parent
            if left < heap.count, heap[left].due < heap[smallest].due { smallest = left }
            if right < heap.count, heap[right].due < heap[smallest].due { smallest = right }
            guard smallest != parent else { return }
            heap.swapAt(parent, smallest)
            parent = smallest
        }
    }
}

/// A multiset of times (milliseconds) with the earliest at hand: a count per distinct time and a
/// min-heap of the distinct times. A time whose count falls to zero stays in the heap until it
/// reaches the top, where it is dropped; the heap is rebuilt when such leftovers outnumber the
/// live times, so it never holds more than about twice as many.
///
/// Pure and not thread-safe: ``ViewSummary`` keeps it behind the view's lock.
struct EarliestTimes: Sendable {
    private var counts: [Int64: Int] = [:]
    private var heap: [Int64] = []

    /// How many times are held (with repeats).
    private(set) var total = 0

    mutating func insert(_ time: Int64, count: Int = 1) {
        guard count > 0 else { return }
        let before = counts[time, default: 0]
        counts[time] = before + count
        total += count
        guard before == 0 else { return }
        push(time)
        if heap.count > 2 * counts.count + 64 { rebuild() }
    }

    mutating func remove(_ time: Int64) {
        guard let before = counts[time] else { return }
        counts[time] = before > 1 ? before - 1 : nil
        total -= 1
        if heap.count > 2 * counts.count + 64 { rebuild() }
    }

    /// The earliest time held, if any.
    mutating func earliest() -> Int64? {
        dropLeftovers()
        return heap.first
    }

    /// Removes the earliest time if it is at or before `limit`, with how many times it held.
    mutating func popEarliest(atOrBefore limit: Int64) -> (time: Int64, count: Int)? {
        dropLeftovers()
        guard let top = heap.first, top <= limit, let count = counts.removeValue(forKey: top) else { return nil }
        popTop()
        total -= count
        return (top, count)
    }

    /// Every distinct time with its count (for moving times back after a clock step).
    var all: [Int64: Int] { counts }

    private mutating func dropLeftovers() {
        // Bounded: each pass removes one heap element.
        while let top = heap.first, counts[top] == nil { popTop() }
    }

    private mutating func rebuild() {
        heap = Array(counts.keys)
        // Heapify: sift down every parent, last first.
        var index = heap.count / 2
        while index > 0 {
            index -= 1
            siftDown(index)
        }
    }

    private mutating func push(_ time: Int64) {
        heap.append(time)
        var child = heap.count - 1
        while child > 0 {
            let parent = (child - 1) / 2
            guard heap[child] < heap[parent] else { break }
            heap.swapAt(child, parent)
            child = parent
        }
    }

    private mutating func popTop() {
        let last = heap.removeLast()
        guard !heap.isEmpty else { return }
        heap[0] = last
        siftDown(0)
    }

    private mutating func siftDown(_ start: Int) {
        var parent = start
        while true {
            let left = 2 * parent + 1
            guard left < heap.count else { return }
            let right = left + 1
            let smaller = right < heap.count && heap[right] < heap[left] ? right : left
            guard heap[smaller] < heap[parent] else { return }
            heap.swapAt(smaller, parent)
            parent = smaller
        }
    }
}

/// Counts the times of a multiset that are at or before a moving "now", without looking at the
/// others: times are moved from ``EarliestTimes`` to a tally of passed ones as now passes them.
/// A clock stepped back moves the times after the new now back (the only walk over them).
struct PassedTimes: Sendable {
    private var upcoming = EarliestTimes()
    private var passed: [Int64: Int] = [:]
    private var passedTotal = 0
    /// Every time at or before this is in `passed`.
    private var cursor = Int64.min

    mutating func insert(_ time: Int64) {
        if time <= cursor {
            passed[time, default: 0] += 1
            passedTotal += 1
        } else {
            upcoming.insert(time)
        }
    }

    mutating func remove(_ time: Int64) {
        if time <= cursor {
            guard let count = passed[time] else { return }
            passed[time] = count > 1 ? count - 1 : nil
            passedTotal -= 1
        } else {
            upcoming.remove(time)
        }
    }

    /// How many times are at or before `now`.
    mutating func count(atOrBefore now: Int64) -> Int {
        if now < cursor {
            for (time, count) in passed where time > now {
                passed[time] = nil
                passedTotal -= count
                upcoming.insert(time, count: count)
            }
        }
        cursor = now
        // Bounded: each pass takes one distinct time out of `upcoming`.
        while let (time, count) = upcoming.popEarliest(atOrBefore: now) {
            passed[time, default: 0] += count
            passedTotal += count
        }
        return passedTotal
    }
}

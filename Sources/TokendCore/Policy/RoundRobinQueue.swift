/// A first-in-first-out queue per key, served in turn: each `next()` takes the oldest element
/// of the key after the one served last. Used to hand out grant slots fairly between the local
/// users whose credentials wait for them, so that one user's thousand due refreshes queue behind
/// each other and not in front of another user's five.
///
/// Within a key the order is arrival order. `append` and `next` are O(1) amortised in the
/// number of elements; a key joins and leaves the rotation in O(keys).
public struct RoundRobinQueue<Key: Hashable, Element> {
    /// One key's waiting elements, oldest from `head` (a storm queues thousands under one key,
    /// and `removeFirst` would move all of them each time).
    private struct Line {
        var elements: [Element] = []
        var head = 0
        var isEmpty: Bool { head == elements.count }

        mutating func popFirst() -> Element {
            let element = elements[head]
            head += 1
            if head == elements.count {
                elements.removeAll(keepingCapacity: true)
                head = 0
            } else if head >= 1024, head * 2 >= elements.count {
                elements.removeFirst(head)
                head = 0
            }
            return element
        }
    }

    private var lines: [Key: Line] = [:]
    /// The keys with waiting elements, in the order they take turns.
    private var rotation: [Key] = []
    /// The position in `rotation` of the key whose turn is next.
    private var cursor = 0
    /// Elements waiting, over all keys.
    public private(set) var count = 0

    public init() {}

    public var isEmpty: Bool { count == 0 }

    /// How many keys have elements waiting.
    public var keyCount: Int { rotation.count }

    /// Queues `element` behind the other elements of `key`. A key that had nothing waiting
    /// joins the rotation at its end: every key already waiting has one turn before it.
    public mutating func append(_ element: Element, for key: Key) {
        if lines[key] == nil {
            lines[key] = Line()
            // Just before the cursor: the last of the keys to take a turn from now.
            rotation.insert(key, at: cursor)
            cursor += 1
            if cursor == rotation.count { cursor = 0 }
        }
        lines[key]!.elements.append(element)
        count += 1
    }

    /// The oldest element of the next key in turn, or nil when nothing waits.
    public mutating func next() -> Element? {
        guard !rotation.isEmpty else { return nil }
        if cursor >= rotation.count { cursor = 0 }
        let key = rotation[cursor]
        let element = lines[key]!.popFirst()
        count -= 1
        if lines[key]!.isEmpty {
            lines.removeValue(forKey: key)
            rotation.remove(at: cursor)
            if cursor >= rotation.count { cursor = 0 }
        } else {
            cursor = (cursor + 1) % rotation.count
        }
        return element
    }
}

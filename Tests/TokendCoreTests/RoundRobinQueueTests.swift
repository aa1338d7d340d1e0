import Testing

@testable import TokendCore

@Suite struct RoundRobinQueueTests {
    @Test func oneKeyIsFirstInFirstOut() {
        var queue = RoundRobinQueue<Int, Int>()
        for i in 0..<3000 { queue.append(i, for: 7) }
        var out: [Int] = []
        while let next = queue.next() { out.append(next) }
        #expect(out == Array(0..<3000))
        #expect(queue.isEmpty && queue.keyCount == 0)
    }

    @Test func keysTakeTurnsWhateverTheirBacklog() {
        var queue = RoundRobinQueue<String, String>()
        for i in 0..<500 { queue.append("hog\(i)", for: "hog") }
        for i in 0..<5 { queue.append("fair\(i)", for: "fair") }
        var firstTen: [String] = []
        for _ in 0..<10 { firstTen.append(queue.next()!) }
        #expect(firstTen.filter { $0.hasPrefix("fair") } == ["fair0", "fair1", "fair2", "fair3", "fair4"])
        #expect(queue.count == 495)
        while let next = queue.next() { #expect(next.hasPrefix("hog")) }
    }

    @Test func aNewKeyWaitsOneTurnOfEveryWaitingKey() {
        var queue = RoundRobinQueue<Character, String>()
        for key in "abc" { for i in 0..<3 { queue.append("\(key)\(i)", for: key) } }
        #expect(queue.next() == "a0")
        queue.append("d0", for: "d")
        var rest: [String] = []
        while let next = queue.next() { rest.append(next) }
        // d joins at the end of the rotation: after b, c and a have had a turn each.
        #expect(rest == ["b0", "c0", "a1", "d0", "b1", "c1", "a2", "b2", "c2"])
    }

    @Test func aKeyThatEmptiesLeavesTheRotationAndMayComeBack() {
        var queue = RoundRobinQueue<Int, Int>()
        queue.append(1, for: 1)
        queue.append(2, for: 2)
        #expect(queue.next() == 1)
        #expect(queue.keyCount == 1)
        queue.append(11, for: 1)
        #expect(queue.next() == 2)
        #expect(queue.next() == 11)
        #expect(queue.next() == nil)
    }

    /// Every element comes out exactly once, and between two elements of one key every other
    /// key that was waiting all along gets a turn.
    @Test func randomSchedulesLoseNothingAndStayFair() {
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<50 {
            var queue = RoundRobinQueue<Int, Int>()
            var expected = 0
            var out: [Int] = []
            var serial = 0
            for _ in 0..<400 {
                if Bool.random(using: &generator) || queue.isEmpty {
                    let key = Int.random(in: 0..<6, using: &generator)
                    queue.append(key * 100_000 + serial, for: key)
                    serial += 1
                    expected += 1
                } else {
                    out.append(queue.next()!)
                }
            }
            while let next = queue.next() { out.append(next) }
            #expect(out.count == expected)
            #expect(Set(out).count == expected)
            // Arrival order within each key.
            for key in 0..<6 {
                let mine = out.filter { $0 / 100_000 == key }
                #expect(mine == mine.sorted())
            }
        }
    }
}

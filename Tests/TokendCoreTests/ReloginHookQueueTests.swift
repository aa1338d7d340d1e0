import Testing

@testable import TokendCore

@Suite struct ReloginHookQueueTests {
    @Test func atMostTheLimitRunAndTheRestStartAsTheyEnd() {
        var queue = ReloginHookQueue<Int>(limit: 2)
        var started: [Int] = []
        for hook in 0..<5 {
            if case .start(let now) = queue.submit(hook, owner: 1000) { started.append(now) }
        }
        #expect(started == [0, 1])
        #expect(queue.running == 2 && queue.waitingCount == 3)
        #expect(queue.finished() == [2])
        #expect(queue.finished() == [3])
        #expect(queue.finished() == [4])
        #expect(queue.running == 2)
        #expect(queue.finished().isEmpty && queue.finished().isEmpty)
        #expect(queue.running == 0)
        if case .start(5) = queue.submit(5, owner: 1000) {} else { Issue.record("a free slot starts the hook at once") }
    }

    /// One user's hundred warnings do not hold another's behind them.
    @Test func waitingHooksTakeTurnsByOwner() {
        var queue = ReloginHookQueue<String>(limit: 1)
        _ = queue.submit("hog-running", owner: 1000)
        for index in 0..<100 { _ = queue.submit("hog\(index)", owner: 1000) }
        _ = queue.submit("other", owner: 1001)
        #expect(queue.finished() == ["hog0"])
        #expect(queue.finished() == ["other"])
        #expect(queue.finished() == ["hog1"])
    }

    @Test func beyondTheWaitingBoundAHookIsDropped() {
        var queue = ReloginHookQueue<Int>(limit: 1, maximumWaiting: 2)
        var admissions: [String] = []
        for hook in 0..<4 {
            switch queue.submit(hook, owner: 7) {
            case .start: admissions.append("start")
            case .waiting: admissions.append("waiting")
            case .dropped: admissions.append("dropped")
            }
        }
        #expect(admissions == ["start", "waiting", "waiting", "dropped"])
    }

    @Test func aHigherLimitStartsWaitingHooksAndALowerOneStartsNoneUntilBelowIt() {
        var queue = ReloginHookQueue<Int>(limit: 1)
        for hook in 0..<4 { _ = queue.submit(hook, owner: 7) }
        #expect(queue.setLimit(3) == [1, 2])
        #expect(queue.setLimit(1).isEmpty)
        #expect(queue.finished().isEmpty)
        #expect(queue.finished().isEmpty)
        #expect(queue.finished() == [3])
        #expect(ReloginHookQueue<Int>(limit: 0).limit == 1)
    }
}

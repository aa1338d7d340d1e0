import Testing

@testable import TokendCore

/// `schedule(contentsOf:)`, the start-up path: the same plan as one `schedule` per user.
struct RefreshScheduleBulkTests {
    func at(_ ms: Int64) -> Timestamp { Timestamp(millisecondsSince1970: ms) }

    @Test func bulkSchedulingPopsInDueOrderLikeSingleInserts() {
        var bulk = RefreshSchedule()
        var single = RefreshSchedule()
        let items = (0..<500).map { (userIdentifier: "user-\($0)", due: at(Int64(($0 * 7919) % 1000))) }
        let due = Dictionary(uniqueKeysWithValues: items.map { ($0.userIdentifier, $0.due) })
        bulk.schedule(contentsOf: items)
        for item in items { single.schedule(item.userIdentifier, at: item.due) }
        #expect(bulk.count == 500)
        #expect(bulk.nextDue == single.nextDue)
        let early = bulk.popDue(now: at(400))
        #expect(Set(early) == Set(single.popDue(now: at(400))))
        #expect(early.allSatisfy { due[$0]! <= at(400) })
        #expect(early.map { due[$0]! } == early.map { due[$0]! }.sorted())
        let rest = bulk.popDue(now: at(10_000))
        #expect(early.count + rest.count == 500)
        #expect(rest.allSatisfy { due[$0]! > at(400) })
    }

    @Test func bulkSchedulingReplacesEarlierPlansAndKeepsOthers() {
        var schedule = RefreshSchedule()
        schedule.schedule("alice", at: at(50))
        schedule.schedule("carol", at: at(10))
        schedule.schedule(contentsOf: [("alice", at(100)), ("bob", at(20))])
        #expect(schedule.dueTime(of: "alice") == at(100))
        #expect(schedule.popDue(now: at(1000)) == ["carol", "bob", "alice"])
    }
}

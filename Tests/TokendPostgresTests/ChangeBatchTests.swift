import Testing

@testable import TokendPostgres

/// Other nodes' changes, gathered while the previous batch is applied.
struct ChangeBatchTests {
    /// Per credential only the latest change counts; a batch holds at most `limit` credentials,
    /// and what is taken stays pending (for the lease news) until it is applied.
    @Test func theLatestChangeOfEachCredentialIsTakenInBoundedBatches() async {
        let batch = ChangeBatch()
        batch.add("alice", generation: 3)
        batch.add("alice", generation: 5)
        batch.add("bob", generation: 4)
        batch.add("carol", generation: 6)
        batch.add("carol", generation: nil)
        let first = await batch.next(limit: 2)
        #expect(first?.count == 2)
        let second = await batch.next(limit: 2)
        #expect(second?.count == 1)
        let taken = (first ?? [:]).merging(second ?? [:]) { _, new in new }
        let expected: [String: Int64?] = ["alice": 5, "bob": 4, "carol": nil]
        #expect(taken == expected)
        #expect(batch.isPending("alice"))
        batch.applied(first ?? [:])
        batch.applied(second ?? [:])
        #expect(!batch.isPending("alice"))
        #expect(!batch.isPending("carol"))
    }

    /// A consumer waiting for changes is woken by one, and by the end of the connection, after
    /// which what was left is still handed over before nil.
    @Test func aWaitingConsumerIsWokenAndTheRestIsHandedOverAfterTheEnd() async {
        let batch = ChangeBatch()
        async let waited = batch.next(limit: 10)
        batch.add("alice", generation: 1)
        let first = await waited
        #expect(first == ["alice": 1])
        batch.add("bob", generation: 2)
        batch.finish()
        let rest = await batch.next(limit: 10)
        #expect(rest == ["bob": 2])
        let end = await batch.next(limit: 10)
        #expect(end == nil)
    }
}

import Synchronization
import Testing

@testable import TokendPostgres

/// `BoundedWait`: store operations and `close()` return within their limits even when the task
/// they wait for ignores cancellation (the cause of a test run that once hung in a Postgres test).
struct BoundedWaitTests {
    @Test func aFinishedTaskGivesItsResult() async throws {
        let task = Task { () throws -> Int in 42 }
        let outcome = await BoundedWait.result(of: task, within: .seconds(5))
        #expect(try outcome?.get() == 42)
    }

    @Test func aFailedTaskGivesItsError() async {
        struct Failure: Error {}
        let task = Task { () throws -> Int in throw Failure() }
        let outcome = await BoundedWait.result(of: task, within: .seconds(5))
        #expect(throws: Failure.self) { try outcome?.get() }
    }

    @Test func aTaskThatNeverEndsIsLeftBehindAtTheLimit() async {
        // Suspended on a continuation nobody resumes, deaf to cancellation.
        let parked = Mutex<CheckedContinuation<Void, Never>?>(nil)
        let task = Task { await withCheckedContinuation { continuation in parked.withLock { $0 = continuation } } }
        task.cancel()
        // Returns although the task cannot have finished: it ends only when resumed below.
        // (No wall-clock bound here: a loaded test machine stretches any timing.)
        let outcome = await BoundedWait.result(of: task, within: .milliseconds(200))
        #expect(outcome == nil)
        // Let it end, so the test leaves nothing running.
        while parked.withLock({ $0 }) == nil { await Task.yield() }
        parked.withLock { $0?.resume() }
        await task.value
    }
}

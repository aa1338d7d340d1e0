import Foundation
import Synchronization

// Part of TokendTestSupport, the helpers every test target shares.

/// Runs blocking work (a read from a child's pipe, a blocking socket call, a polling loop) on a
/// thread of its own and suspends the calling task until it is done.
///
/// Not on a task: Swift's cooperative pool has one thread per core (two here), tests run in
/// parallel, and two blocked reads would stop every other test — including the timer task
/// that was meant to end the wait by killing the child.
public func onOwnThread<Result: Sendable>(_ work: sending @escaping () throws -> Result) async throws -> Result {
    let work = Handover(work)
    return try await withCheckedThrowingContinuation { continuation in
        Thread.detachNewThread { continuation.resume(with: Swift.Result { try work.value() }) }
    }
}

/// `onOwnThread` for work that cannot fail.
public func onOwnThread<Result: Sendable>(_ work: sending @escaping () -> Result) async -> Result {
    let work = Handover(work)
    return await withCheckedContinuation { continuation in
        Thread.detachNewThread { continuation.resume(returning: work.value()) }
    }
}

/// Carries a `sending` closure to the one thread that runs it. `sending` already guarantees
/// that nothing else holds what the closure captured.
private struct Handover<Value>: @unchecked Sendable {
    let value: Value
    init(_ value: sending Value) { self.value = value }
}

/// A flag one task raises to end a loop running on its own thread.
public final class StopFlag: Sendable {
    private let raised = Mutex(false)
    public init() {}
    public func raise() { raised.withLock { $0 = true } }
    public var isRaised: Bool { raised.withLock { $0 } }
}

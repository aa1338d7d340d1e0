import NIOCore
import NIOPosix

/// Where tokend's Swift-concurrency tasks run.
public enum ConcurrencyExecutor {
    /// Runs every task on NIO's singleton event loops instead of a separate cooperative thread
    /// pool (`NIOSingletons.unsafeTryInstallSingletonPosixEventLoopGroupAsConcurrencyGlobalExecutor`).
    ///
    /// Why: a refresh grant is a chain of short steps, each resumed by I/O — the token endpoint's
    /// answer arrives on an event loop, the store's commit on its writer queue. With a separate
    /// pool every resumption wakes another thread, and on a small VM a cross-CPU wake-up costs
    /// tens of microseconds, which made up most of a grant's CPU time. On the event loops a task
    /// resumed by I/O runs on the loop that saw the I/O (NIO's enqueue is sticky), with no
    /// thread switch. The price: a task that blocks, blocks that loop's sockets too — tokend's
    /// tasks never block (store calls hop to GRDB's queues, long pure work such as start-up
    /// planning runs on Dispatch's pool).
    ///
    /// Call once, first thing in `main`. Returns whether it took effect (it does not when
    /// another hook is already installed, in which case the default pool keeps the tasks).
    @discardableResult
    public static func useEventLoops() -> Bool {
        NIOSingletons.unsafeTryInstallSingletonPosixEventLoopGroupAsConcurrencyGlobalExecutor()
    }
}

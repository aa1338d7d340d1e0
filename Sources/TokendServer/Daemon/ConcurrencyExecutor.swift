import CTokendShims
import NIOCore
import NIOPosix

/// Where tokend's Swift-concurrency tasks run.
public enum ConcurrencyExecutor {
    /// How the event loops became Swift's global executor, if they did.
    public enum Installation: Sendable, Equatable {
        /// NIO installed them (it finds the runtime's hook with `dlsym`: a dynamically linked runtime).
        case nio
        /// tokend installed them through the hook's linked address (a statically linked runtime,
        /// where `dlsym` cannot see it).
        case linkedHook
        /// Another hook was already installed: tasks stay on Swift's own thread pool.
        case notInstalled
    }

    /// Runs every task on NIO's singleton event loops instead of a separate cooperative thread
    /// pool.
    ///
    /// Why: a refresh grant is a chain of short steps, each resumed by I/O — the token endpoint's
    /// answer arrives on an event loop, the store's commit on its writer queue. With a separate
    /// pool every resumption wakes another thread, and on a small VM a cross-CPU wake-up costs
    /// tens of microseconds, which made up most of a grant's CPU time. On the event loops a task
    /// resumed by I/O runs on the loop that saw the I/O (the enqueue is sticky), with no
    /// thread switch. The price: a task that blocks, blocks that loop's sockets too — tokend's
    /// tasks never block (store calls hop to GRDB's queues, long pure work such as start-up
    /// planning runs on Dispatch's pool).
    ///
    /// NIO's own installer (`NIOSingletons.unsafeTryInstallSingletonPosixEventLoopGroupAsConcurrencyGlobalExecutor`)
    /// finds the runtime's hook variable with `dlsym`, which sees only dynamic symbols; the
    /// shipped tokend links the Swift runtime statically, so there the hook is installed through
    /// its address as the linker resolved it (`tokend_install_swift_enqueue_global_hook`), with
    /// the same compare-and-swap and the same sticky choice of loop.
    ///
    /// Call once, first thing in `main`.
    @discardableResult
    public static func useEventLoops() -> Installation {
        if NIOSingletons.unsafeTryInstallSingletonPosixEventLoopGroupAsConcurrencyGlobalExecutor() { return .nio }
        return installThroughLinkedHook() ? .linkedHook : .notInstalled
    }

    /// The runtime's hook type: the job, and the runtime's own enqueue (unused: every job goes to
    /// a loop).
    private typealias EnqueueGlobalHook = @convention(thin) (UnownedJob, @convention(thin) (UnownedJob) -> Void) -> Void

    private static func installThroughLinkedHook() -> Bool {
        withUnsafeTemporaryAllocation(of: EnqueueGlobalHook.self, capacity: 1) { hook in
            // `any()` is sticky: a job enqueued from one of the singleton's loops stays on it.
            hook.baseAddress!.initialize(to: { job, _ in MultiThreadedEventLoopGroup.singleton.any().enqueue(ExecutorJob(job)) })
            // A thin function is one code pointer; the runtime stores and calls it as such.
            return hook.baseAddress!.withMemoryRebound(to: UnsafeRawPointer.self, capacity: 1) {
                tokend_install_swift_enqueue_global_hook($0.pointee) == 0
            }
        }
    }
}

/// Which `relogin_command` hooks run now: at most `limit` at once; the others wait, and are
/// handed their turn round-robin by the uid the credential is for, so that one user with many
/// credentials warning at once neither starts as many root processes nor holds up another
/// user's hooks behind theirs. At most `maximumWaiting` wait; a hook beyond that is not run
/// (its warning is still said in the journal and to watchers).
public struct ReloginHookQueue<Hook> {
    /// What became of a submitted hook.
    public enum Admission {
        /// Run it now.
        case start(Hook)
        /// It waits for a running hook to end.
        case waiting
        /// Too many wait already: it is not run.
        case dropped
    }

    public private(set) var limit: Int
    public let maximumWaiting: Int
    public private(set) var running = 0
    private var waiting = RoundRobinQueue<UInt32, Hook>()

    /// - Parameters:
    ///   - limit: Hooks that may run at once (at least 1).
    ///   - maximumWaiting: Hooks that may wait at once.
    public init(limit: Int, maximumWaiting: Int = 4096) {
        self.limit = max(1, limit)
        self.maximumWaiting = maximumWaiting
    }

    /// Hooks waiting for their turn.
    public var waitingCount: Int { waiting.count }

    /// A new hook for a credential of `owner`.
    public mutating func submit(_ hook: Hook, owner: UInt32) -> Admission {
        if running < limit, waiting.isEmpty {
            running += 1
            return .start(hook)
        }
        guard waiting.count < maximumWaiting else { return .dropped }
        waiting.append(hook, for: owner)
        return .waiting
    }

    /// A running hook ended: the hooks to start now (the next in turn, if any).
    public mutating func finished() -> [Hook] {
        running -= 1
        return startable()
    }

    /// A reload changed the limit: the hooks a higher limit lets start now.
    public mutating func setLimit(_ newLimit: Int) -> [Hook] {
        limit = max(1, newLimit)
        return startable()
    }

    private mutating func startable() -> [Hook] {
        var started: [Hook] = []
        while running < limit, let next = waiting.next() {
            running += 1
            started.append(next)
        }
        return started
    }
}

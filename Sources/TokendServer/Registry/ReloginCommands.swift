import Logging
import Synchronization
import TokendCore
import TokendProtocol

/// Runs the providers' `relogin_command` hooks through a ``ReloginHookQueue``: at most
/// `daemon.max_relogin_commands` at once, the others in turn by owner.
final class ReloginCommands: Sendable {
    /// One hook to run: the program, the warning it is told, whose credential, its timeout.
    struct Hook: Sendable {
        let command: String
        let warning: ReloginWarning
        let ownerUID: UInt32
        let timeout: Duration
    }

    private let queue: Mutex<ReloginHookQueue<Hook>>
    /// When a dropped hook was last logged (one line a minute).
    private let lastDropReport = Mutex<ContinuousClock.Instant?>(nil)
    private let logger: Logger

    init(limit: Int, logger: Logger) {
        queue = Mutex(ReloginHookQueue(limit: limit))
        self.logger = logger
    }

    /// Runs `hook` now, or when its turn comes.
    func submit(_ hook: Hook) {
        switch queue.withLock({ $0.submit(hook, owner: hook.ownerUID) }) {
        case .start(let now): start(now)
        case .waiting: break
        case .dropped: reportDropped(hook)
        }
    }

    /// A reload's `daemon.max_relogin_commands`.
    func setLimit(_ limit: Int) {
        for hook in queue.withLock({ $0.setLimit(limit) }) { start(hook) }
    }

    private func start(_ hook: Hook) {
        let logger = logger
        Task.detached { [self] in
            await CredentialRegistry.runReloginCommand(
                hook.command, warning: hook.warning, ownerUID: hook.ownerUID, timeout: hook.timeout, logger: logger)
            for next in queue.withLock({ $0.finished() }) { start(next) }
        }
    }

    private func reportDropped(_ hook: Hook) {
        let now = ContinuousClock.now
        let report = lastDropReport.withLock { last in
            guard last.map({ now - $0 >= .seconds(60) }) ?? true else { return false }
            last = now
            return true
        }
        guard report else { return }
        logger.warning(
            "relogin_command not run: too many warnings already wait for a hook",
            metadata: [
                "user_identifier": "\(hook.warning.userIdentifier)", "provider": "\(hook.warning.provider)",
                "waiting": "\(queue.withLock { $0.waitingCount })",
            ])
    }
}

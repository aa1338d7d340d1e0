import Logging
import TokendConfig
import TokendCore
import TokendProtocol

/// Re-login warnings: when each credential's next warning threshold passes
/// (``ReloginWarningPlan``, TokendCore), the record of what was said (stored with the
/// credential), and saying it — the journal, `WatchReloginWarnings` watchers
/// (``ReloginWarningHub``) and the provider's `relogin_command`.
extension CredentialRegistry {
    /// Looks at `user`'s warnings at the scheduler's next turn (after a change of the credential).
    func scheduleReloginCheck(_ user: String) {
        let current = now()
        reloginChecks.schedule(user, at: current)
        if wakeup.isNeeded(for: current) { wake() }
    }

    /// Looks at every credential's warnings at once (start-up).
    func scheduleReloginChecks(_ users: [String]) {
        let current = now()
        reloginChecks.schedule(contentsOf: users.map { ($0, current) })
        if !users.isEmpty { wake() }
    }

    /// Decides `user`'s warnings now: keeps the one in force for watchers, plans the next wake,
    /// and says a threshold that has passed (recorded first, so it is said once).
    func checkRelogin(_ user: String, now current: Timestamp) {
        guard let entry = view[user], let provider = settings.current.providers[entry.provider],
            entry.status.state != .reauthenticationRequired, let deadline = entry.relogin, !provider.relogin.thresholds.isEmpty
        else {
            reloginChecks.cancel(user)
            view.reloginHub.setInForce(user, nil)
            return
        }
        let plan = ReloginWarningPlan.decide(
            deadline: deadline, thresholds: provider.relogin.thresholds, record: entry.reloginWarnings, now: current)
        if let wakeAt = plan.wakeAt { reloginChecks.schedule(user, at: wakeAt) } else { reloginChecks.cancel(user) }
        if plan.say == nil {
            view.reloginHub.setInForce(user, plan.inForce.map { Self.warning(entry, deadline: deadline, threshold: $0) })
        }
        guard plan.changed else { return }
        // Recorded under the credential's locks, after any grant that spends its refresh token
        // (a grant's commit must not meet a newer generation), and decided again on the stored
        // copy: another node of a shared store may have said it already.
        Task { await self.recordAndSayRelogin(user) }
    }

    private func recordAndSayRelogin(_ user: String) async {
        await lockRefreshToken(user)
        defer { unlockRefreshToken(user) }
        await lock(user)
        defer { unlock(user) }
        let providers = settings.current.providers
        let current = now()
        guard let stored = try? await store.load(userIdentifier: user), let provider = providers[stored.provider],
            stored.status.state != .reauthenticationRequired,
            let deadline = ReloginDeadline.of(stored, policy: provider.refreshPolicy)
        else { return }
        let plan = ReloginWarningPlan.decide(
            deadline: deadline, thresholds: provider.relogin.thresholds, record: stored.reloginWarnings, now: current)
        guard plan.changed else { return }
        var updated = stored
        updated.reloginWarnings = plan.record
        let written: Credential
        do {
            written = try await store.update(updated, expectedGeneration: stored.generation)
        } catch {
            // Said by nobody now; the next check (a change, or the scheduler's next turn) decides again.
            logger.error("recording a re-login warning failed: \(error)", metadata: ["user_identifier": "\(user)"])
            return
        }
        let entry = updateView(written, provider: provider)
        guard let threshold = plan.say else { return }
        let warning = Self.warning(entry, deadline: deadline, threshold: threshold)
        logger.warning(
            "credential needs a new login soon",
            metadata: [
                "user_identifier": "\(user)", "provider": "\(warning.provider)", "relogin_by": "\(warning.reloginBy)",
                "relogin_in": "\(DurationFormat.humanReadable(deadline.at - current))", "reason": "\(warning.reason)",
                "threshold": "\(warning.threshold)", "command": "\(warning.command)",
            ])
        view.reloginHub.say(warning)
        if let command = provider.relogin.command {
            reloginCommands.submit(
                .init(command: command, warning: warning, ownerUID: Self.ownerUID(entry), timeout: provider.relogin.commandTimeout))
        }
    }

    /// The uid the credential is for: its only reader when that is a uid, else who enrolled it.
    static func ownerUID(_ entry: ViewEntry) -> UInt32 {
        if entry.readers.count == 1, case .uid(let uid) = entry.readers[0] { return uid }
        return entry.enrolment.uid
    }

    /// Runs the provider's `relogin_command` for `warning`: no arguments, the warning in its
    /// environment (never a token), killed with everything it started after `timeout`; a failure
    /// is logged. `TOKEND_CREDENTIAL` is the name whoever enrolled the credential chose: the hook
    /// must treat it as data (docs/operations.md, config/relogin-hook.example.sh).
    static func runReloginCommand(_ command: String, warning: ReloginWarning, ownerUID: UInt32, timeout: Duration, logger: Logger) async {
        let environment = [
            "TOKEND_CREDENTIAL": warning.userIdentifier, "TOKEND_PROVIDER": warning.provider, "TOKEND_OWNER_UID": "\(ownerUID)",
            "TOKEND_RELOGIN_BY": "\(warning.reloginBy)", "TOKEND_RELOGIN_REASON": warning.reason, "TOKEND_THRESHOLD": warning.threshold,
        ]
        let metadata: Logger.Metadata = [
            "user_identifier": "\(warning.userIdentifier)", "provider": "\(warning.provider)", "relogin_command": "\(command)",
        ]
        let problem: String
        do {
            switch try await CommandRunner.run([command], environment: environment, input: [], timeout: timeout, maximumOutputBytes: 4096) {
            case .exited(0, _): return
            case .exited(let status, _): problem = "exited with status \(status)"
            case .signalled(let signal): problem = "was killed by signal \(signal)"
            case .timedOut: problem = "did not finish within \(DurationFormat.humanReadable(timeout)) and was killed"
            }
        } catch {
            problem = "could not be run: \(error)"
        }
        logger.warning("relogin_command \(problem)", metadata: metadata)
    }

    /// The warning for `entry` at `threshold`.
    static func warning(_ entry: ViewEntry, deadline: ReloginDeadline, threshold: ReloginThreshold) -> ReloginWarning {
        ReloginWarning(
            userIdentifier: entry.userIdentifier, provider: entry.provider, reloginBy: deadline.at.secondsSince1970,
            threshold: threshold.label, reason: deadline.reason.rawValue,
            command: "tokenctl login \(ShellWord.argument(entry.userIdentifier))")
    }
}

import TokendCore
import TokendStorage
import TokendSystemd

/// Keeps the service manager's `STATUS=` line current: recomputed when the view changes (never
/// on a timer), sent only when its text differs from the last one.
struct StatusReporter: Sendable {
    let view: CredentialView
    let changes: ChangeSignal
    let notifier: SystemdNotifier
    let now: @Sendable () -> Timestamp
    /// The credential store's health; an unavailable store is part of the line.
    var storeHealth: @Sendable () -> StoreHealth = { StoreHealth(kind: "sqlite") }

    /// The summary of the view now, from the counts the view keeps (a refresh wave over a
    /// million credentials changes the view constantly: walking it for every update would cost
    /// a core).
    func summary() -> StatusLine {
        let current = now()
        let counts = view.counts(now: current)
        var line = StatusLine(credentials: counts.credentials, reauthenticationRequired: counts.reauthenticationRequired)
        line.retrying = counts.retrying
        line.nextRefresh = counts.nextRefreshAt.map { max($0, current).secondsSince1970 }
        // `systemctl status` shows this line to every local user: the database's own words (its
        // host, how it failed) are in the journal, not here.
        line.storeProblem = storeHealth().problem.map { _ in "details in the journal" }
        return line
    }

    /// Sends `STATUS=` after each change until cancelled.
    ///
    /// - Parameters:
    ///   - sent: The status text already sent (with `READY=1`).
    ///   - seen: The change generation that text reflects.
    func run(sent: String, seen: UInt64) async {
        var last = sent
        var seen = seen
        while !Task.isCancelled {
            seen = await changes.wait(after: seen)
            guard !Task.isCancelled else { return }
            // Coalesce a burst of changes (a start-up refresh wave) into one update.
            try? await Task.sleep(for: .milliseconds(200))
            seen = changes.generation
            let text = summary().text
            if text != last {
                notifier.notify(.status(text))
                last = text
            }
        }
    }
}

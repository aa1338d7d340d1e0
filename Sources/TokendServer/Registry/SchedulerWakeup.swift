import TokendCore

/// The scheduler loop's sleep: until its next event, or until woken by a plan that comes
/// earlier, a wall-clock step or cancellation.
struct SchedulerWakeup {
    private var sleeper: CheckedContinuation<Void, Never>?
    private var target: Timestamp?
    private var timer: Task<Void, Never>?

    /// Whether a plan due at `due` must wake the loop: it is earlier than the sleep's end.
    func isNeeded(for due: Timestamp) -> Bool {
        if let target { return due < target }
        return sleeper != nil
    }

    /// Starts a sleep until `target`; `timer` resumes it then (through ``fire()``).
    mutating func sleep(_ continuation: CheckedContinuation<Void, Never>, until target: Timestamp, timer: Task<Void, Never>) {
        self.sleeper = continuation
        self.target = target
        self.timer = timer
    }

    /// Ends the current sleep, if any.
    mutating func fire() {
        timer?.cancel()
        timer = nil
        target = nil
        if let sleeper {
            self.sleeper = nil
            sleeper.resume()
        }
    }
}

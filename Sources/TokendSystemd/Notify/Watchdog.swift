import CSystemd
import Logging
import Synchronization

/// The service manager's watchdog settings (`WatchdogSec=` in the unit).
public struct WatchdogSettings: Sendable, Hashable {
    /// How long the service manager waits for a `WATCHDOG=1` before it considers the service hung.
    public var timeout: Duration

    /// How often tokend checks itself and pings: half the timeout, as `sd_watchdog_enabled(3)`
    /// recommends.
    public var interval: Duration { timeout / 2 }

    /// - Parameter timeout: The watchdog timeout.
    public init(timeout: Duration) { self.timeout = timeout }

    /// The watchdog settings in `environment` for process `pid`, by the rules of
    /// `sd_watchdog_enabled`: `WATCHDOG_USEC` is a positive number of microseconds, and
    /// `WATCHDOG_PID`, when set, must be `pid`.
    ///
    /// - Parameters:
    ///   - environment: The process environment.
    ///   - pid: This process's id.
    /// - Returns: The settings, or `nil` when the watchdog is off for this process.
    public static func parse(environment: [String: String], pid: Int32) -> WatchdogSettings? {
        guard let text = environment["WATCHDOG_USEC"], let microseconds = UInt64(text), microseconds > 0 else {
            return nil
        }
        if let pidText = environment["WATCHDOG_PID"], !pidText.isEmpty {
            guard let watchdogPID = Int32(pidText), watchdogPID == pid else { return nil }
        }
        return WatchdogSettings(timeout: .microseconds(Int64(clamping: microseconds)))
    }

    /// The settings `sd_watchdog_enabled(3)` reports for this process (environment variables
    /// are left in place).
    public static func fromServiceManager() -> WatchdogSettings? {
        var microseconds: UInt64 = 0
        guard sd_watchdog_enabled(0, &microseconds) > 0, microseconds > 0 else { return nil }
        return WatchdogSettings(timeout: .microseconds(Int64(clamping: microseconds)))
    }
}

/// Pings the service manager's watchdog, but only for a daemon that really works.
///
/// Every `interval` a probe starts (the daemon passes one that goes through each event loop and
/// the store's writer); each probe that completes sends one ping. While a probe is stuck, no
/// new probe starts and no ping is sent, so a wedged daemon misses its deadline and the service
/// manager restarts it. A probe that fails is logged and sends no ping either.
public struct Watchdog: Sendable {
    private let interval: Duration
    private let probe: @Sendable () async throws -> Void
    private let ping: @Sendable () -> Void
    private let logger: Logger

    /// - Parameters:
    ///   - interval: How often to probe (half the watchdog timeout).
    ///   - logger: Where stuck and failed probes are reported.
    ///   - probe: The health check; returns when every part it checks has answered.
    ///   - ping: Sends `WATCHDOG=1`.
    public init(
        interval: Duration, logger: Logger, probe: @escaping @Sendable () async throws -> Void,
        ping: @escaping @Sendable () -> Void
    ) {
        self.interval = interval
        self.probe = probe
        self.ping = ping
        self.logger = logger
    }

    /// Probes and pings until the task is cancelled.
    public func run() async {
        let state = ProbeBox()
        while !Task.isCancelled {
            let start = state.value.withLock { $0.begin() }
            switch start {
            case .started:
                // Unstructured on purpose: a probe stuck on a wedged event loop must not keep
                // this loop (or shutdown, which cancels it) waiting. At most one exists at a time.
                let probe = self.probe
                let ping = self.ping
                let logger = self.logger
                Task {
                    do {
                        try await probe()
                        if state.value.withLock({ $0.finish() }) { ping() }
                    } catch {
                        // After cancellation (shutdown closes what the probe checks) a failure is expected.
                        if state.value.withLock({ $0.finish() }) {
                            logger.warning(
                                "watchdog probe failed; not telling the service manager all is well: \(error)")
                        }
                    }
                }
            case .stillRunning(let missed):
                if missed == 1 {
                    logger.warning(
                        "watchdog probe has not completed within \(interval); not telling the service manager all is well"
                    )
                }
            }
            try? await Task.sleep(for: interval)
        }
        state.value.withLock { $0.cancelled = true }
    }

    private final class ProbeBox: Sendable {
        let value = Mutex(ProbeState())
    }

    private struct ProbeState {
        var running = false
        var missed = 0
        var cancelled = false

        enum Start {
            case started
            case stillRunning(missed: Int)
        }

        mutating func begin() -> Start {
            if running {
                missed += 1
                return .stillRunning(missed: missed)
            }
            running = true
            missed = 0
            return .started
        }

        /// Returns whether to ping.
        mutating func finish() -> Bool {
            running = false
            return !cancelled
        }
    }
}

import CSystemd

#if canImport(Glibc)
    import Glibc
#endif

/// One state change told to the service manager, as in `sd_notify(3)`.
public enum NotifyState: Sendable, Hashable {
    /// Start-up (or a reload) is finished: `READY=1`.
    case ready
    /// A reload has begun: `RELOADING=1` with `MONOTONIC_USEC=`, the `CLOCK_MONOTONIC` time it began.
    case reloading(monotonicMicroseconds: UInt64)
    /// Shutdown has begun: `STOPPING=1`.
    case stopping
    /// The daemon is alive and well: `WATCHDOG=1`.
    case watchdog
    /// A one-line, human-readable status: `STATUS=`.
    case status(String)

    /// The `NAME=value` lines for this state.
    var assignments: [String] {
        switch self {
        case .ready: ["READY=1"]
        case .reloading(let microseconds): ["RELOADING=1", "MONOTONIC_USEC=\(microseconds)"]
        case .stopping: ["STOPPING=1"]
        case .watchdog: ["WATCHDOG=1"]
        case .status(let text): ["STATUS=" + NotifyState.singleLine(text)]
        }
    }

    /// Assignments are separated by newlines, so a status must not contain any.
    static func singleLine(_ text: String) -> String {
        String(text.unicodeScalars.map { $0 == "\n" || $0 == "\r" ? " " : Character($0) })
    }
}

/// Tells the service manager about readiness, status, reloads, shutdown and liveness through
/// `sd_notify(3)`. Does nothing when `NOTIFY_SOCKET` is not set (not started by systemd, or by
/// a unit that is not `Type=notify`).
public struct SystemdNotifier: Sendable {
    /// Whether `NOTIFY_SOCKET` was set, i.e. whether messages go anywhere.
    public let isEnabled: Bool

    /// - Parameter environment: The process environment; only `NOTIFY_SOCKET` is read.
    public init(environment: [String: String]) {
        isEnabled = !(environment["NOTIFY_SOCKET"] ?? "").isEmpty
    }

    /// The datagram `sd_notify` sends for `states`: their assignments, one per line.
    ///
    /// - Parameter states: What to tell, in order.
    /// - Returns: The message text.
    public static func message(_ states: [NotifyState]) -> String {
        states.flatMap(\.assignments).joined(separator: "\n")
    }

    /// Sends `states` in one datagram.
    ///
    /// - Parameter states: What to tell, in order.
    /// - Returns: Whether the message was sent (false when disabled or when sending failed).
    @discardableResult
    public func notify(_ states: NotifyState...) -> Bool {
        notify(states)
    }

    /// Sends `states` in one datagram.
    ///
    /// - Parameter states: What to tell, in order.
    /// - Returns: Whether the message was sent (false when disabled or when sending failed).
    @discardableResult
    public func notify(_ states: [NotifyState]) -> Bool {
        guard isEnabled, !states.isEmpty else { return false }
        // sd_notify reads NOTIFY_SOCKET itself; 0 keeps it set for later messages.
        return sd_notify(0, Self.message(states)) > 0
    }

    /// `CLOCK_MONOTONIC` now, in microseconds (for `MONOTONIC_USEC=`).
    public static func monotonicMicroseconds() -> UInt64 {
        var spec = timespec()
        clock_gettime(CLOCK_MONOTONIC, &spec)
        return UInt64(spec.tv_sec) * 1_000_000 + UInt64(spec.tv_nsec) / 1000
    }
}

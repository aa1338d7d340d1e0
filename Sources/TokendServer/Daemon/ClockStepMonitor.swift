import CTokendShims
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Notices when the wall clock is set (NTP step, `date -s`, resume with a corrected clock), so
/// refreshes planned in wall-clock time are re-checked at once instead of after a sleep that
/// was computed against the old time.
///
/// Linux reports it through a `timerfd` armed with `TFD_TIMER_CANCEL_ON_SET`: a read fails with
/// `ECANCELED` whenever `CLOCK_REALTIME` is set. One blocked thread, no polling.
final class ClockStepMonitor: @unchecked Sendable {
    // @unchecked: `descriptor` is written once in `start()` before the thread starts, and the
    // thread is the only reader afterwards; `stop()` only closes it.
    private var descriptor: Int32 = -1
    private let onStep: @Sendable () -> Void

    init(onStep: @escaping @Sendable () -> Void) { self.onStep = onStep }

    /// Starts watching; returns false when the kernel does not support it.
    @discardableResult
    func start() -> Bool {
        descriptor = tokend_clock_step_timerfd()
        guard descriptor >= 0 else { return false }
        let fd = descriptor
        let onStep = self.onStep
        let thread = Thread {
            var expirations: UInt64 = 0
            while true {
                let n = read(fd, &expirations, 8)
                if n < 0 && errno == ECANCELED {
                    onStep()
                    guard tokend_clock_step_rearm(fd) == 0 else { return }
                } else if n < 0 && errno == EINTR {
                    continue
                } else {
                    return  // closed, or an unexpected expiry far in the future
                }
            }
        }
        thread.name = "tokend-clock-step"
        thread.start()
        return true
    }

    func stop() {
        if descriptor >= 0 {
            close(descriptor)
            descriptor = -1
        }
    }
}

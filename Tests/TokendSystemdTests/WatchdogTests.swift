import Logging
import Synchronization
import Testing
import TokendSystemd

final class Counter: Sendable {
    let value = Mutex(0)
    func increment() { value.withLock { $0 += 1 } }
    var current: Int { value.withLock { $0 } }
}

final class Gate: Sendable {
    let open = Mutex(true)
}

struct WatchdogTests {
    @Test func pingsOncePerPassedProbe() async throws {
        let pings = Counter(), probes = Counter()
        let watchdog = Watchdog(
            interval: .milliseconds(20), logger: Logger(label: "test"), probe: { probes.increment() },
            ping: { pings.increment() })
        let task = Task { await watchdog.run() }
        try await Task.sleep(for: .milliseconds(300))
        task.cancel()
        await task.value
        #expect(pings.current >= 3)
        #expect(pings.current <= probes.current)
    }

    @Test func aStuckProbeStopsThePings() async throws {
        let pings = Counter(), probes = Counter()
        let gate = Gate()
        let watchdog = Watchdog(
            interval: .milliseconds(20), logger: Logger(label: "test"),
            probe: {
                probes.increment()
                while !gate.open.withLock({ $0 }) { try await Task.sleep(for: .milliseconds(5)) }
            }, ping: { pings.increment() })
        gate.open.withLock { $0 = false }
        let task = Task { await watchdog.run() }
        try await Task.sleep(for: .milliseconds(200))
        // Wedged: one probe started, none finished, nothing was pinged, no probes piled up.
        #expect(pings.current == 0)
        #expect(probes.current == 1)
        gate.open.withLock { $0 = true }
        try await Task.sleep(for: .milliseconds(200))
        #expect(pings.current >= 1, "pings resume once the probe gets through")
        task.cancel()
        await task.value
    }

    @Test func aFailingProbeSendsNoPing() async throws {
        struct Broken: Error {}
        let pings = Counter()
        let watchdog = Watchdog(
            interval: .milliseconds(20), logger: Logger(label: "test"), probe: { throw Broken() },
            ping: { pings.increment() })
        let task = Task { await watchdog.run() }
        try await Task.sleep(for: .milliseconds(150))
        task.cancel()
        await task.value
        #expect(pings.current == 0)
    }
}

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

/// Polls `condition` until it holds or `timeout` passes. Generous on purpose: in a full `swift
/// test` run other suites block cooperative threads (2 on this machine) for seconds at a time,
/// which delays these tasks without making them wrong.
func eventually(timeout: Duration = .seconds(60), _ condition: () -> Bool) async -> Bool {
    let deadline = ContinuousClock.now + timeout
    while ContinuousClock.now < deadline {
        if condition() { return true }
        try? await Task.sleep(for: .milliseconds(5))
    }
    return condition()
}

struct WatchdogTests {
    @Test func pingsOncePerPassedProbe() async throws {
        let pings = Counter()
        let probes = Counter()
        let watchdog = Watchdog(
            interval: .milliseconds(20), logger: Logger(label: "test"), probe: { probes.increment() },
            ping: { pings.increment() })
        let task = Task { await watchdog.run() }
        #expect(await eventually { pings.current >= 3 })
        task.cancel()
        await task.value
        #expect(pings.current <= probes.current)
    }

    @Test func aStuckProbeStopsThePings() async throws {
        let pings = Counter()
        let probes = Counter()
        let gate = Gate()
        gate.open.withLock { $0 = false }
        let watchdog = Watchdog(
            interval: .milliseconds(20), logger: Logger(label: "test"),
            probe: {
                probes.increment()
                while !gate.open.withLock({ $0 }) { try await Task.sleep(for: .milliseconds(5)) }
            }, ping: { pings.increment() })
        let task = Task { await watchdog.run() }
        #expect(await eventually { probes.current == 1 })
        try await Task.sleep(for: .milliseconds(200))  // ten intervals
        // Wedged: one probe started, none finished, nothing was pinged, no probes piled up.
        #expect(pings.current == 0)
        #expect(probes.current == 1)
        gate.open.withLock { $0 = true }
        #expect(await eventually { pings.current >= 1 }, "pings resume once the probe gets through")
        task.cancel()
        await task.value
    }

    @Test func aFailingProbeSendsNoPing() async throws {
        struct Broken: Error {}
        let pings = Counter()
        let probes = Counter()
        let watchdog = Watchdog(
            interval: .milliseconds(20), logger: Logger(label: "test"),
            probe: {
                probes.increment()
                throw Broken()
            }, ping: { pings.increment() })
        let task = Task { await watchdog.run() }
        #expect(await eventually { probes.current >= 3 })
        task.cancel()
        await task.value
        #expect(pings.current == 0)
    }
}

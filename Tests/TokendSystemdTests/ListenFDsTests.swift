import Testing
import TokendSystemd

struct ListenFDsTests {
    @Test func parsesDescriptorsForThisProcess() {
        let passed = ListenFDs.parse(
            environment: ["LISTEN_PID": "42", "LISTEN_FDS": "2", "LISTEN_FDNAMES": "varlink:metrics"], pid: 42)
        #expect(passed == ListenFDs(descriptors: [3, 4], names: ["varlink", "metrics"]))
    }

    @Test(arguments: [
        ["LISTEN_PID": "41", "LISTEN_FDS": "1"],  // meant for another process (a parent)
        ["LISTEN_FDS": "1"],  // no LISTEN_PID
        ["LISTEN_PID": "42", "LISTEN_FDS": "0"],
        ["LISTEN_PID": "42", "LISTEN_FDS": "-1"],
        ["LISTEN_PID": "42", "LISTEN_FDS": "x"],
        ["LISTEN_PID": "forty-two", "LISTEN_FDS": "1"],
        [:],
    ])
    func ignoresWhatIsNotForThisProcess(environment: [String: String]) {
        #expect(ListenFDs.parse(environment: environment, pid: 42) == nil)
    }

    @Test func namesThatDoNotMatchTheCountAreDropped() {
        let passed = ListenFDs.parse(
            environment: ["LISTEN_PID": "7", "LISTEN_FDS": "1", "LISTEN_FDNAMES": "a:b"], pid: 7)
        #expect(passed == ListenFDs(descriptors: [3]))
    }

    @Test func noSocketsWereHandedToTheTestProcess() throws {
        // The test runner is not socket-activated; take() must say so rather than fail.
        #expect(try ListenFDs.take() == nil)
    }

    @Test func watchdogSettings() {
        #expect(WatchdogSettings.parse(environment: ["WATCHDOG_USEC": "30000000"], pid: 9)?.interval == .seconds(15))
        #expect(
            WatchdogSettings.parse(environment: ["WATCHDOG_USEC": "1000000", "WATCHDOG_PID": "9"], pid: 9)?.timeout
                == .seconds(1))
        #expect(WatchdogSettings.parse(environment: ["WATCHDOG_USEC": "1000000", "WATCHDOG_PID": "8"], pid: 9) == nil)
        #expect(WatchdogSettings.parse(environment: ["WATCHDOG_USEC": "0"], pid: 9) == nil)
        #expect(WatchdogSettings.parse(environment: [:], pid: 9) == nil)
    }
}

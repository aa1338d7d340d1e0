import Testing
import TokendSystemd

struct NotifierTests {
    @Test(arguments: [
        ([NotifyState.ready], "READY=1"),
        ([.ready, .status("serving 3 credentials")], "READY=1\nSTATUS=serving 3 credentials"),
        ([.reloading(monotonicMicroseconds: 123_456_789)], "RELOADING=1\nMONOTONIC_USEC=123456789"),
        ([.stopping], "STOPPING=1"),
        ([.watchdog], "WATCHDOG=1"),
        ([.status("two\nlines\r")], "STATUS=two lines "),
    ])
    func formatsMessages(states: [NotifyState], expected: String) {
        #expect(SystemdNotifier.message(states) == expected)
    }

    @Test func isDisabledWithoutNotifySocket() {
        #expect(!SystemdNotifier(environment: [:]).isEnabled)
        #expect(!SystemdNotifier(environment: ["NOTIFY_SOCKET": ""]).isEnabled)
        #expect(SystemdNotifier(environment: ["NOTIFY_SOCKET": "/run/systemd/notify"]).isEnabled)
        // Disabled: nothing is sent, and nothing fails.
        #expect(!SystemdNotifier(environment: [:]).notify(.ready))
    }

    @Test func monotonicClockAdvances() {
        let first = SystemdNotifier.monotonicMicroseconds()
        let second = SystemdNotifier.monotonicMicroseconds()
        #expect(first > 0 && second >= first)
    }

    @Test func statusLine() {
        let pinned: (Int64) -> String = { _ in "14:05:31" }
        #expect(
            StatusLine(credentials: 1234, reauthenticationRequired: 2, nextRefresh: 1).text(timeOfDay: pinned)
                == "serving 1234 credentials, 2 need reauthentication, next refresh 14:05:31")
        #expect(
            StatusLine(credentials: 1, reauthenticationRequired: 1).text(timeOfDay: pinned)
                == "serving 1 credential, 1 needs reauthentication")
        #expect(
            StatusLine(credentials: 5, reauthenticationRequired: 0, retrying: 2, nextRefresh: 1).text(timeOfDay: pinned)
                == "serving 5 credentials, 0 need reauthentication, 2 retrying, next refresh 14:05:31")
        #expect(StatusLine.timeOfDay(hour: 4, minute: 5, second: 9) == "04:05:09")
    }
}

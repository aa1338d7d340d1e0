import Testing
import TokenctlSupport
import TokendClient

/// What `tokenctl notify` shows and remembers.
struct ReloginNotificationTests {
    static func warning(_ user: String = "alice", by: Int64 = 1_795_000_000, threshold: String = "1d", reason: String = "max_token_age")
        -> ReloginWarning
    {
        ReloginWarning(
            userIdentifier: user, provider: "corp", reloginBy: by, threshold: threshold, reason: reason, command: "tokenctl login \(user)")
    }

    @Test(
        arguments: [
            (Int64(0), Int64(0), "1970-01-01 00:00 UTC"),
            (1_795_000_000, 0, "2026-11-18 11:06 UTC"),
            (1_795_000_000, 3600, "2026-11-18 12:06 +01:00"),
            (1_795_000_000, -5 * 3600 - 1800, "2026-11-18 05:36 -05:30"),
            (951_782_400, 0, "2000-02-29 00:00 UTC"),
            (-1, 0, "1969-12-31 23:59 UTC"),
            (4_102_444_799, 0, "2099-12-31 23:59 UTC"),
        ] as [(Int64, Int64, String)])
    func localTime(epoch: Int64, offset: Int64, expected: String) {
        #expect(ReloginNotification.localTime(epoch, utcOffsetSeconds: offset) == expected)
    }

    @Test func theNotificationNamesProviderDateAndCommand() {
        let shown = ReloginNotification(Self.warning(), utcOffsetSeconds: 0)
        #expect(shown.summary == "Log in again to corp by 2026-11-18 11:06 UTC")
        #expect(shown.body.contains("'alice'") && shown.body.hasSuffix("Run: tokenctl login alice"))
        #expect(ReloginNotification(Self.warning(reason: "session_end"), utcOffsetSeconds: 0).body.contains("ends the login"))
    }

    @Test func theRecordRemembersEachWarningOnceAndSurvivesItsText() {
        var record = NotifiedRecord()
        let first = Self.warning(threshold: "7d")
        let second = Self.warning(threshold: "1d")
        #expect(!record.contains(first))
        record.insert(first)
        record.insert(first)
        record.insert(second)
        #expect(record.keys.count == 2)
        // A new login (another date) is another warning.
        #expect(!record.contains(Self.warning(by: 1_795_100_000, threshold: "7d")))
        let reread = NotifiedRecord(text: record.text + "garbage\nbob\tnot-a-number\t1d\n\t1\t1d\n")
        #expect(reread == record && reread.contains(first) && reread.contains(second))
    }

    @Test func theRecordIsBounded() {
        var record = NotifiedRecord()
        for i in 0..<(NotifiedRecord.maximumEntries + 10) { record.insert(Self.warning("u\(i)")) }
        #expect(record.keys.count == NotifiedRecord.maximumEntries)
        #expect(!record.contains(Self.warning("u0")) && record.contains(Self.warning("u\(NotifiedRecord.maximumEntries + 9)")))
        record.prune(now: 1_795_000_000 + NotifiedRecord.retention + 1)
        #expect(record.keys.isEmpty)
        record.insert(Self.warning())
        record.prune(now: 1_795_000_000 + NotifiedRecord.retention)
        #expect(record.keys.count == 1)
    }
}

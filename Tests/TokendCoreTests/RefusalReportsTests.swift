import Testing

@testable import TokendCore

@Suite struct RefusalReportsTests {
    @Test func oneLineAMinutePerUidCountingTheRefusalsBetween() {
        var reports = RefusalReports()
        let start = ContinuousClock.now
        #expect(reports.record(uid: 7, now: start) == 1)
        for second in 1..<60 { #expect(reports.record(uid: 7, now: start + .seconds(second)) == 0) }
        // Another uid has its own minute.
        #expect(reports.record(uid: 8, now: start + .seconds(30)) == 1)
        #expect(reports.record(uid: 7, now: start + .seconds(60)) == 60)
        #expect(reports.record(uid: 7, now: start + .seconds(61)) == 0)
    }

    @Test func manyUidsDoNotGrowItWithoutBound() {
        var reports = RefusalReports()
        let start = ContinuousClock.now
        for uid in 0..<10_000 { #expect(reports.record(uid: UInt32(uid), now: start + .seconds(uid)) == 1) }
    }
}

import Testing
import TokenctlSupport
import TokendClient
import TokendProtocol

/// `tokenctl status` shows the caller's use of its per-uid limits under the daemon line.
@Suite struct StatusTableQuotaTests {
    let now: Int64 = 1_700_000_000

    @Test func aUserSeesTheirUsageAgainstEachLimit() {
        var daemon = DaemonStatus(version: "1.0", startedAt: now - 100, credentials: 3, valid: 3)
        daemon.caller = QuotaUsage(
            uid: 1000, administrator: false, connections: 2, maxConnections: 128, credentials: 3, maxCredentials: 256, callsInFlight: 0,
            maxCallsInFlight: 64)
        let lines = StatusTable.render(daemon: daemon, credentials: [], now: now).split(separator: "\n").map(String.init)
        #expect(lines[1] == "uid 1000: 2 of 128 connections, 3 of 256 credentials, 0 of 64 calls waiting", "\(lines)")
    }

    @Test func anAdministratorIsToldTheLimitsDoNotApply() {
        let usage = QuotaUsage(
            uid: 0, administrator: true, connections: 1, maxConnections: 128, credentials: 700, maxCredentials: 256, callsInFlight: 0,
            maxCallsInFlight: 64)
        #expect(StatusTable.usageLine(usage) == "uid 0 (administrator, not limited per uid): 1 connection, 700 credentials")
    }

    @Test func theUsageSurvivesTheWire() throws {
        var daemon = DaemonStatus(version: "1.0", startedAt: now)
        daemon.caller = QuotaUsage(
            uid: 7, administrator: false, connections: 1, maxConnections: 2, credentials: 3, maxCredentials: 4, callsInFlight: 5,
            maxCallsInFlight: 6)
        #expect(try DaemonStatus(json: daemon.json) == daemon)
        // An older daemon sends none.
        #expect(try DaemonStatus(json: DaemonStatus(version: "1.0", startedAt: now).json).caller == nil)
    }
}

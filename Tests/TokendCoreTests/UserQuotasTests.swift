import Testing

@testable import TokendCore

@Suite struct UserQuotasTests {
    let quotas = UserQuotas(connectionsPerUID: 4, reservedAdminConnections: 3, credentialsPerUID: 2, callsInFlightPerUID: 5)

    @Test func aUserGetsTheirShareOfConnectionsAndNoMore() {
        #expect(quotas.admitConnection(open: 0, openForUID: 3, maximum: 10, isAdmin: false) == nil)
        #expect(quotas.admitConnection(open: 4, openForUID: 4, maximum: 10, isAdmin: false) == QuotaRefusal(.connectionsPerUID, limit: 4))
    }

    @Test func theReserveIsForAdministratorsOnly() {
        // 7 of 10 open: the last 3 are reserved.
        #expect(quotas.admitConnection(open: 7, openForUID: 0, maximum: 10, isAdmin: false) == QuotaRefusal(.connections, limit: 7))
        #expect(quotas.admitConnection(open: 7, openForUID: 0, maximum: 10, isAdmin: true) == nil)
        #expect(quotas.admitConnection(open: 9, openForUID: 9, maximum: 10, isAdmin: true) == nil)
        // Nobody beyond max_connections, administrators included.
        #expect(quotas.admitConnection(open: 10, openForUID: 0, maximum: 10, isAdmin: true) == QuotaRefusal(.connections, limit: 10))
    }

    @Test func aReserveLargerThanTheMaximumLeavesNothingShared() {
        let all = UserQuotas(connectionsPerUID: 4, reservedAdminConnections: 50)
        #expect(all.admitConnection(open: 0, openForUID: 0, maximum: 10, isAdmin: false) == QuotaRefusal(.connections, limit: 0))
        #expect(all.admitConnection(open: 0, openForUID: 0, maximum: 10, isAdmin: true) == nil)
    }

    @Test func credentialsAndCallsAreCountedForNonAdministrators() {
        #expect(quotas.admitCredential(held: 1, isAdmin: false) == nil)
        #expect(quotas.admitCredential(held: 2, isAdmin: false) == QuotaRefusal(.credentialsPerUID, limit: 2))
        #expect(quotas.admitCredential(held: 2000, isAdmin: true) == nil)
        #expect(quotas.admitCall(inFlight: 4, isAdmin: false) == nil)
        #expect(quotas.admitCall(inFlight: 5, isAdmin: false) == QuotaRefusal(.callsInFlightPerUID, limit: 5))
        #expect(quotas.admitCall(inFlight: 500, isAdmin: true) == nil)
    }

    @Test func refusalsDescribeThemselves() {
        #expect("\(QuotaRefusal(.credentialsPerUID, limit: 256))" == "credentials_per_uid (256)")
    }
}

import Testing
import TokendCore

@testable import TokendConfig

/// The per-uid limits of `[daemon]`: defaults, what they follow, and the errors that name a key.
@Suite struct QuotaConfigurationTests {
    @Test func defaultsForTheDefaultMaximum() throws {
        let configuration = try parseConfig("[daemon]\n")
        #expect(
            configuration.quotas
                == UserQuotas(connectionsPerUID: 128, reservedAdminConnections: 64, credentialsPerUID: 256, callsInFlightPerUID: 64))
    }

    @Test func defaultsFollowASmallMaximumDown() throws {
        let configuration = try parseConfig("[daemon]\nmax_connections = 60\n")
        #expect(configuration.quotas.reservedAdminConnections == 15)
        #expect(configuration.quotas.connectionsPerUID == 45)
        let one = try parseConfig("[daemon]\nmax_connections = 1\n")
        #expect(one.quotas.reservedAdminConnections == 0 && one.quotas.connectionsPerUID == 1)
    }

    @Test func everyKeyIsRead() throws {
        let configuration = try parseConfig(
            """
            [daemon]
            max_connections = 500
            reserved_admin_connections = 100
            max_connections_per_uid = 20
            max_credentials_per_uid = 0
            max_calls_in_flight_per_uid = 7
            """)
        #expect(
            configuration.quotas
                == UserQuotas(connectionsPerUID: 20, reservedAdminConnections: 100, credentialsPerUID: 0, callsInFlightPerUID: 7))
    }

    @Test func limitsThatLeaveNothingForOthersAreErrorsNamingTheKey() {
        let reserve = configError("[daemon]\nmax_connections = 10\nreserved_admin_connections = 10\n")
        #expect(reserve?.key == "daemon.reserved_admin_connections", "\(String(describing: reserve))")
        let share = configError("[daemon]\nmax_connections = 100\nreserved_admin_connections = 20\nmax_connections_per_uid = 90\n")
        #expect(share?.key == "daemon.max_connections_per_uid", "\(String(describing: share))")
        #expect(share?.description.contains("less reserved_admin_connections (20)") == true, "\(String(describing: share))")
        let zero = configError("[daemon]\nmax_calls_in_flight_per_uid = 0\n")
        #expect(zero?.key == "daemon.max_calls_in_flight_per_uid")
        let type = configError("[daemon]\nmax_credentials_per_uid = \"many\"\n")
        #expect(type?.key == "daemon.max_credentials_per_uid")
    }
}

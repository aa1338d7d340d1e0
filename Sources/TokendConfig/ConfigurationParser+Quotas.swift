import TokendCore

extension ConfigurationParser {
    /// The per-uid limits of `[daemon]`. A user's connection share must leave room for others:
    /// it may not exceed what `max_connections` leaves after the administrators' reserve.
    func parseQuotas(_ daemon: inout ConfigTableReader, into configuration: inout DaemonConfiguration) throws(ConfigurationError) {
        var quotas = configuration.quotas
        if let reserve = try daemon.integer("reserved_admin_connections", in: 0...1_000_000) { quotas.reservedAdminConnections = reserve }
        if let perUID = try daemon.integer("max_connections_per_uid", in: 1...1_000_000) { quotas.connectionsPerUID = perUID }
        if let credentials = try daemon.integer("max_credentials_per_uid", in: 0...10_000_000) { quotas.credentialsPerUID = credentials }
        if let calls = try daemon.integer("max_calls_in_flight_per_uid", in: 1...1_000_000) { quotas.callsInFlightPerUID = calls }
        let maximum = configuration.maxConnections
        // The defaults follow a small max_connections down instead of refusing it: the reserve
        // is at most a quarter of it, a user's share at most what the reserve leaves.
        if daemon.members["reserved_admin_connections"] == nil {
            quotas.reservedAdminConnections = min(quotas.reservedAdminConnections, maximum / 4)
        }
        guard quotas.reservedAdminConnections < maximum else {
            throw daemon.error(
                "reserved_admin_connections",
                "\(quotas.reservedAdminConnections) leaves no connection of max_connections (\(maximum)) for other users")
        }
        if daemon.members["max_connections_per_uid"] == nil {
            quotas.connectionsPerUID = min(quotas.connectionsPerUID, maximum - quotas.reservedAdminConnections)
        } else if quotas.connectionsPerUID > maximum - quotas.reservedAdminConnections {
            throw daemon.error(
                "max_connections_per_uid",
                "\(quotas.connectionsPerUID) is more than max_connections (\(maximum)) less reserved_admin_connections (\(quotas.reservedAdminConnections))"
            )
        }
        configuration.quotas = quotas
    }
}

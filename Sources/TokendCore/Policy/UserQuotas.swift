/// How much one local user may make tokend hold: connections, self-enrolled credentials, calls
/// waiting for an answer. The socket is open to every user on the host, so these limits are
/// what keeps one of them from starving or flooding the others. Administrators (root and the
/// admin groups) are not counted against them, and a share of the connections is kept for them
/// alone so that they can still act when everyone else's slots are full.
public struct UserQuotas: Sendable, Hashable {
    /// Connections one non-administrator uid may hold open at once.
    public var connectionsPerUID: Int
    /// Connections of `max_connections` that only administrators may use.
    public var reservedAdminConnections: Int
    /// Credentials a non-administrator may hold for themself (readers = their uid alone).
    public var credentialsPerUID: Int
    /// Calls of one non-administrator uid that may wait for an answer at once (refreshes,
    /// store writes), over all their connections.
    public var callsInFlightPerUID: Int

    public init(
        connectionsPerUID: Int = 128, reservedAdminConnections: Int = 64, credentialsPerUID: Int = 256, callsInFlightPerUID: Int = 64
    ) {
        self.connectionsPerUID = connectionsPerUID
        self.reservedAdminConnections = reservedAdminConnections
        self.credentialsPerUID = credentialsPerUID
        self.callsInFlightPerUID = callsInFlightPerUID
    }
}

/// A limit that refused something, as the `QuotaExceeded` error names it.
public struct QuotaRefusal: Sendable, Hashable, CustomStringConvertible {
    public enum Quota: String, Sendable, Hashable {
        /// The daemon is full for non-administrators (or for everyone at `max_connections`).
        case connections
        case connectionsPerUID = "connections_per_uid"
        case credentialsPerUID = "credentials_per_uid"
        case callsInFlightPerUID = "calls_in_flight_per_uid"
    }

    public var quota: Quota
    public var limit: Int

    public init(_ quota: Quota, limit: Int) {
        self.quota = quota
        self.limit = limit
    }

    public var description: String { "\(quota.rawValue) (\(limit))" }
}

extension UserQuotas {
    /// Whether a new connection may open.
    ///
    /// - Parameters:
    ///   - open: connections open now, over all users.
    ///   - openForUID: connections the caller's uid has open now.
    ///   - maximum: `max_connections`.
    ///   - isAdmin: whether the caller is an administrator.
    /// - Returns: nil to accept, else the limit that refuses it.
    public func admitConnection(open: Int, openForUID: Int, maximum: Int, isAdmin: Bool) -> QuotaRefusal? {
        if open >= maximum { return QuotaRefusal(.connections, limit: maximum) }
        if isAdmin { return nil }
        let shared = max(0, maximum - reservedAdminConnections)
        if open >= shared { return QuotaRefusal(.connections, limit: shared) }
        if openForUID >= connectionsPerUID { return QuotaRefusal(.connectionsPerUID, limit: connectionsPerUID) }
        return nil
    }

    /// Whether a non-administrator holding `held` credentials may add one more.
    public func admitCredential(held: Int, isAdmin: Bool) -> QuotaRefusal? {
        guard !isAdmin, held >= credentialsPerUID else { return nil }
        return QuotaRefusal(.credentialsPerUID, limit: credentialsPerUID)
    }

    /// Whether a call that must wait for an answer may start, with `inFlight` of the same uid
    /// already waiting.
    public func admitCall(inFlight: Int, isAdmin: Bool) -> QuotaRefusal? {
        guard !isAdmin, inFlight >= callsInFlightPerUID else { return nil }
        return QuotaRefusal(.callsInFlightPerUID, limit: callsInFlightPerUID)
    }
}

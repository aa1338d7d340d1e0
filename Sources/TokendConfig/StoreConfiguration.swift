import TokendCore

/// Where credentials are kept: the embedded SQLite database (one host, the default) or a
/// PostgreSQL database shared by several hosts (`[store] kind = "postgresql"`).
public enum StoreConfiguration: Sendable, Hashable {
    case sqlite
    case postgresql(PostgresStoreConfiguration)
}

/// `[store]` with `kind = "postgresql"`.
public struct PostgresStoreConfiguration: Sendable, Hashable {
    /// `postgresql://USER@HOST[:PORT]/DATABASE` (no password: see `password`).
    public var url: String
    /// Read from `password_file`; never logged.
    public var password: SecretString?
    /// How long a node's refresh lease lasts before another node may take the refresh over.
    public var lease: Duration
    /// How often a node compares its view with the database (a missed notification).
    public var reconcileInterval: Duration

    public init(url: String, password: SecretString? = nil, lease: Duration = .seconds(30), reconcileInterval: Duration = .seconds(30)) {
        self.url = url
        self.password = password
        self.lease = lease
        self.reconcileInterval = reconcileInterval
    }
}

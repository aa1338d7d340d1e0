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
    /// `tls`: whether the connection must be encrypted and the server verified.
    public var tls: StoreTLS = .prefer

    public init(url: String, password: SecretString? = nil, lease: Duration = .seconds(30), reconcileInterval: Duration = .seconds(30)) {
        self.url = url
        self.password = password
        self.lease = lease
        self.reconcileInterval = reconcileInterval
    }
}

/// `[store] tls` (and `tls_ca_file`) of the shared store.
public enum StoreTLS: Sendable, Hashable {
    /// `"prefer"`, the default: TLS when the server offers it, plaintext when it (or anyone on
    /// the path) answers that it has none.
    case prefer
    /// `"verify-full"`: TLS or nothing, the server's certificate verified against `tls_ca_file`
    /// and the URL's host.
    case verifyFull(caFile: String)
}

/// Where the shared PostgreSQL store lives and how long a node's refresh lease lasts.
public struct PostgresStoreSettings: Sendable, Equatable {
    /// `postgresql://user@host:port/database`.
    public var url: String
    /// The password, read from `password_file` at start; never logged.
    public var password: String?
    /// How long a refresh lease is held before another node may take it over (milliseconds).
    public var leaseMilliseconds: Int64
    /// This node's name in leases and status (`daemon.node_name`, default the host name).
    public var nodeName: String
    /// How often a node compares its view with the database, in case a notification was missed
    /// (milliseconds).
    public var reconcileMilliseconds: Int64
    /// The longest one database operation may take before it counts as a failure (milliseconds).
    public var operationTimeoutMilliseconds: Int64
    /// Rows per page of the reads that walk the whole store (start-up, reconciliation, the keys
    /// in use): each page is one operation, so the whole read is bounded by the operation
    /// timeout per page.
    public var readPageSize = 5_000
    /// Whether the connection must be encrypted and the server's certificate verified.
    public var tls: PostgresTLSMode
    /// The node's state directory, where it keeps what it remembers of the store
    /// (``SharedStoreMemory``, `shared-store.sqlite`) across restarts; `nil` keeps it in memory
    /// only.
    public var stateDirectory: String?

    public init(
        url: String, password: String?, leaseMilliseconds: Int64, nodeName: String, reconcileMilliseconds: Int64 = 30_000,
        operationTimeoutMilliseconds: Int64 = 5_000, tls: PostgresTLSMode = .prefer, stateDirectory: String? = nil
    ) {
        self.url = url
        self.password = password
        self.leaseMilliseconds = leaseMilliseconds
        self.nodeName = nodeName
        self.reconcileMilliseconds = reconcileMilliseconds
        self.operationTimeoutMilliseconds = operationTimeoutMilliseconds
        self.tls = tls
        self.stateDirectory = stateDirectory
    }
}

/// How the connection to the database is protected (`[store] tls`).
public enum PostgresTLSMode: Sendable, Equatable {
    /// TLS if the server offers it (its certificate checked against the system's CAs), else
    /// plaintext: anyone on the path who answers "no TLS" can read and change the traffic.
    case prefer
    /// TLS or no connection, and the server's certificate must chain to a certificate in
    /// `caFile` and name the host of the store's URL (libpq's `verify-full`).
    case verifyFull(caFile: String)
}

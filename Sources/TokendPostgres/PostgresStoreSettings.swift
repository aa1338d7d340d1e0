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

    public init(url: String, password: String?, leaseMilliseconds: Int64, nodeName: String) {
        self.url = url
        self.password = password
        self.leaseMilliseconds = leaseMilliseconds
        self.nodeName = nodeName
    }
}

/// A provider whose refreshes are done by a local command (`kind = "exec"`).
public struct ExecSettings: Sendable, Hashable {
    /// The program and its fixed arguments. Secrets never go here: the command reads them from stdin.
    public var command: [String]
    /// The command is killed when it runs longer than this.
    public var timeout: Duration

    public init(command: [String], timeout: Duration = .seconds(10)) {
        self.command = command
        self.timeout = timeout
    }
}

/// How the refresh engine treats providers as a whole.
public struct RefreshLimits: Sendable, Hashable {
    /// At most this many grants run at once, across all providers.
    public var maxGrantsInFlight: Int
    /// A caller-triggered refresh of one credential happens at most once per this interval.
    public var forcedRefreshInterval: Duration
    /// Backoff for transient failures.
    public var retryInitial: Duration
    public var retryMaximum: Duration
    /// HTTP timeouts for token endpoints.
    public var httpConnectTimeout: Duration
    public var httpTimeout: Duration
    /// At most this many `relogin_command` hooks run at once (`max_relogin_commands`).
    public var maxReloginCommands = 4

    public init(
        maxGrantsInFlight: Int = 8, forcedRefreshInterval: Duration = .seconds(30), retryInitial: Duration = .seconds(1),
        retryMaximum: Duration = .seconds(300), httpConnectTimeout: Duration = .seconds(5), httpTimeout: Duration = .seconds(15)
    ) {
        self.maxGrantsInFlight = maxGrantsInFlight
        self.forcedRefreshInterval = forcedRefreshInterval
        self.retryInitial = retryInitial
        self.retryMaximum = retryMaximum
        self.httpConnectTimeout = httpConnectTimeout
        self.httpTimeout = httpTimeout
    }
}

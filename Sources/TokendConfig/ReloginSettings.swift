import TokendCore

/// How a provider's credentials warn ahead of their re-login date (`relogin_warning`,
/// `relogin_command`, `relogin_command_timeout`).
public struct ReloginSettings: Sendable, Hashable {
    /// How long before the re-login date each warning is said, longest first; empty: none.
    public var thresholds: [ReloginThreshold]
    /// An administrator's program run for each warning (its path only; the warning is in its
    /// environment, never a token).
    public var command: String?
    /// The command is killed when it runs longer than this.
    public var commandTimeout: Duration

    public init(thresholds: [ReloginThreshold] = ReloginThreshold.defaults, command: String? = nil, commandTimeout: Duration = .seconds(30))
    {
        self.thresholds = thresholds
        self.command = command
        self.commandTimeout = commandTimeout
    }
}

extension ConfigurationParser {
    /// Reads a provider's `relogin_*` keys.
    func parseRelogin(_ table: inout ConfigTableReader) throws(ConfigurationError) -> ReloginSettings {
        var settings = ReloginSettings()
        if let texts = try table.stringArray("relogin_warning") {
            var thresholds: [ReloginThreshold] = []
            for text in texts {
                do {
                    thresholds.append(try ReloginThreshold(parsing: text))
                } catch {
                    throw table.error("relogin_warning", "\(error.description); each entry is a lead such as \"7d\" or \"1h\", above 0")
                }
            }
            guard Set(thresholds.map(\.lead)).count == thresholds.count else {
                throw table.error("relogin_warning", "lists the same lead twice")
            }
            settings.thresholds = thresholds.sorted { $0.lead > $1.lead }
        }
        if let command = try table.string("relogin_command") {
            guard !command.isEmpty else { throw table.error("relogin_command", "is empty; give the path of a program") }
            settings.command = resolve(command)
        }
        if let timeout = try table.duration("relogin_command_timeout") {
            guard timeout >= .milliseconds(100), timeout <= .seconds(3600) else {
                throw table.error("relogin_command_timeout", "must be between 100ms and 1h")
            }
            settings.commandTimeout = timeout
        }
        return settings
    }
}

extension ConfigurationParser {
    /// `[audit]`: `enabled = true|false`.
    func parseAudit(_ value: ConfigValue?) throws(ConfigurationError) -> AuditConfiguration {
        var table = try ConfigTableReader(file: file, path: "audit", value: value)
        var audit = AuditConfiguration()
        if let enabled = try table.boolean("enabled") { audit.enabled = enabled }
        try table.finish()
        return audit
    }
}

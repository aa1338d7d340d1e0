import TokendCore

extension ConfigurationParser {
    /// `[daemon] node_name`: letters, digits, `.`, `-`, `_` (it appears in leases, status and
    /// change notifications); `nil` means the host name.
    func parseNodeName(_ daemon: inout ConfigTableReader) throws(ConfigurationError) -> String? {
        guard let name = try daemon.string("node_name") else { return nil }
        guard Self.isValidNodeName(name) else {
            throw daemon.error("node_name", "\"\(name)\" is not a node name (1–64 letters, digits, '.', '-', '_')")
        }
        return name
    }

    /// Whether `name` can name a node.
    public static func isValidNodeName(_ name: String) -> Bool {
        !name.isEmpty && name.utf8.count <= 64
            && name.unicodeScalars.allSatisfy {
                $0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0) || ".-_".unicodeScalars.contains($0))
            }
    }

    /// `[store] tls` (`prefer` or `verify-full`) and `tls_ca_file` (required by `verify-full`,
    /// refused otherwise).
    func parseStoreTLS(_ table: inout ConfigTableReader) throws(ConfigurationError) -> StoreTLS {
        let mode = try table.string("tls") ?? "prefer"
        let caFile = try table.string("tls_ca_file").map(resolve)
        switch mode {
        case "prefer":
            if caFile != nil { throw table.error("tls_ca_file", "is only used with tls = \"verify-full\"") }
            return .prefer
        case "verify-full":
            guard let caFile else { throw table.error("tls_ca_file", "is required with tls = \"verify-full\" (the CA's PEM file)") }
            return .verifyFull(caFile: caFile)
        default:
            throw table.error("tls", "unknown mode \"\(mode)\" (supported: prefer, verify-full)")
        }
    }

    /// `[store]`: absent or `kind = "sqlite"` for the embedded store, `kind = "postgresql"` with
    /// `url`, optional `password_file`, `lease`, `reconcile_interval`, `tls` and `tls_ca_file` for
    /// the shared one.
    func parseStore(_ value: ConfigValue?, limits: RefreshLimits) throws(ConfigurationError) -> StoreConfiguration {
        var table = try ConfigTableReader(file: file, path: "store", value: value)
        let kind = try table.string("kind") ?? "sqlite"
        switch kind {
        case "sqlite":
            try table.finish()
            return .sqlite
        case "postgresql":
            let url = try table.requiredString("url")
            guard url.hasPrefix("postgresql://") || url.hasPrefix("postgres://") else {
                throw table.error("url", "must be postgresql://USER@HOST[:PORT]/DATABASE")
            }
            let authority = url.drop(while: { $0 != "/" }).dropFirst(2).prefix(while: { $0 != "/" })
            if let at = authority.lastIndex(of: "@"), authority[..<at].contains(":") {
                throw table.error("url", "must not contain a password; put it in password_file")
            }
            var settings = PostgresStoreConfiguration(url: url)
            if let lease = try table.duration("lease") {
                guard lease >= .seconds(1), lease <= .seconds(3600) else { throw table.error("lease", "must be between 1s and 1h") }
                settings.lease = lease
            }
            guard settings.lease > limits.httpTimeout else {
                throw table.error(
                    "lease",
                    "must be longer than daemon.http_timeout (\(DurationFormat.humanReadable(limits.httpTimeout))), so a grant ends before its lease"
                )
            }
            if let interval = try table.duration("reconcile_interval") {
                guard interval >= .milliseconds(100), interval <= .seconds(3600) else {
                    throw table.error("reconcile_interval", "must be between 100ms and 1h")
                }
                settings.reconcileInterval = interval
            }
            if let passwordFile = try table.string("password_file") {
                let path = resolve(passwordFile)
                do {
                    let password = try readSecretFile(path).trimmingTrailingNewlines()
                    guard !password.isEmpty else { throw table.error("password_file", "\(path) is empty") }
                    settings.password = SecretString(password)
                } catch let error as ConfigurationError {
                    throw error
                } catch {
                    throw table.error("password_file", "cannot read \(path): \(error)")
                }
            }
            settings.tls = try parseStoreTLS(&table)
            try table.finish()
            return .postgresql(settings)
        default:
            throw table.error("kind", "unknown store kind \"\(kind)\" (supported: sqlite, postgresql)")
        }
    }
}

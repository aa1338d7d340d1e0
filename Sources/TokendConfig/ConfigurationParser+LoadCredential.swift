import TokendCore

extension ConfigurationParser {
    /// `[load_credential]`: the `LoadCredential=` socket (off unless `socket` is set or systemd
    /// passes it), and what it serves.
    func parseLoadCredential(_ value: ConfigValue?, into configuration: inout DaemonConfiguration) throws(ConfigurationError) {
        var table = try ConfigTableReader(file: file, path: "load_credential", value: value)
        // "" is none, as for daemon.admin_socket.
        if let given = try table.string("socket"), !given.isEmpty {
            let path = resolve(given)
            guard path.utf8.count <= 107 else {
                throw table.error("socket", "\(path) is longer than a Unix socket address holds (107 bytes)")
            }
            guard path != configuration.socketPath, path != configuration.adminSocketPath else {
                throw table.error("socket", "is the path of another of tokend's sockets (daemon.socket or daemon.admin_socket)")
            }
            configuration.loadCredentialSocketPath = path
        }
        var settings = LoadCredentialSettings()
        if let validity = try table.duration("min_valid") {
            guard validity <= .seconds(30 * 86400) else { throw table.error("min_valid", "must be at most 30d") }
            settings.minimumValidity = validity
        }
        if let timeout = try table.duration("timeout") {
            guard timeout <= .seconds(600) else { throw table.error("timeout", "must be at most 10m (the unit waits meanwhile)") }
            settings.timeout = timeout
        }
        if let format = try parseFormat(&table) { settings.format = format }
        let ids = try ConfigTableReader(file: file, path: "load_credential.ids", value: table.raw("ids"))
        for id in ids.tableNames() {
            guard LoadCredentialName.isCredentialID(Substring(id)) else {
                throw ids.error(id, "is not a credential ID systemd takes (1–255 printable ASCII characters, no '/' or ':')")
            }
            var entry = try ConfigTableReader(file: file, path: "load_credential.ids.\(id)", value: ids.members[id])
            var target = LoadCredentialSettings.Target()
            if let credential = try entry.string("credential") {
                guard !credential.isEmpty else { throw entry.error("credential", "must not be empty") }
                target.credential = credential
            }
            target.format = try parseFormat(&entry)
            try entry.finish()
            settings.ids[id] = target
        }
        try table.finish()
        configuration.loadCredential = settings
    }

    private func parseFormat(_ table: inout ConfigTableReader) throws(ConfigurationError) -> LoadCredentialSettings.Format? {
        guard let text = try table.string("format") else { return nil }
        guard let format = LoadCredentialSettings.Format(rawValue: text) else {
            let names = LoadCredentialSettings.Format.allCases.map { "\"\($0.rawValue)\"" }.joined(separator: " or ")
            throw table.error("format", "\"\(text)\" is not \(names)")
        }
        return format
    }
}

import TokendCore

extension ConfigurationParser {
    /// Reads the keys of a `kind = "hat"` provider and adjusts its refresh policy to the PDA's
    /// rules: the login ends 30 days after it started (unless `max_session_age` says otherwise),
    /// a token is never served past `iat + idle_limit`, and it is renewed `renewal_interval`
    /// after its `iat` (unless `refresh_at` says otherwise).
    func parseHAT(_ table: inout ConfigTableReader, policy: inout RefreshPolicy) throws(ConfigurationError) -> HATSettings {
        let scheme = try table.string("scheme")?.lowercased() ?? "https"
        guard scheme == "https" || scheme == "http" else {
            throw table.error("scheme", "\"\(scheme)\" is not https (or http, for a loopback address)")
        }
        let address = try table.requiredString("address").lowercased()
        guard let parsed = ParsedURL("\(scheme)://\(address)"), parsed.path.isEmpty else {
            throw table.error("address", "\"\(address)\" is not a PDA address such as \"postman.hubat.net\" (no scheme, path or user)")
        }
        if scheme == "http", !EndpointPolicy.isLoopback(parsed.host) {
            throw table.error(
                "scheme", "refusing plain http to \(parsed.host): tokens are only sent over https, except to loopback addresses")
        }
        let application = try table.requiredString("application")
        guard application.utf8.count <= 256, application.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
            throw table.error("application", "must be printable ASCII without spaces")
        }
        var urls: [String: String] = [:]
        for key in ["redirect", "fallback"] {
            let url = try table.requiredString(key)
            do {
                _ = try EndpointPolicy.check(url)
            } catch {
                throw table.error(key, error.description)
            }
            urls[key] = url
        }
        var settings = HATSettings(
            address: address, application: application, redirect: urls["redirect"] ?? "", fallback: urls["fallback"] ?? "", scheme: scheme
        )
        if let caFile = try table.string("ca_file") { settings.caFile = resolve(caFile) }
        settings.proxy = try parseProxy(&table)
        for (key, keyPath) in [("public_key_path", \HATSettings.publicKeyPath), ("renewal_path", \HATSettings.renewalPath)] {
            guard let path = try table.string(key) else { continue }
            guard path.hasPrefix("/"), path.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F && $0 != UInt8(ascii: "#") }) else {
                throw table.error(key, "\"\(path)\" is not an absolute path such as \"/publickey\"")
            }
            settings[keyPath: keyPath] = path
        }
        if let header = try table.string("renewal_header") {
            guard Self.isHeaderName(header) else { throw table.error("renewal_header", "\"\(header)\" is not an HTTP header name") }
            settings.renewalHeader = header
        }
        if let idle = try table.duration("idle_limit") { settings.idleLimit = idle }
        settings.renewalInterval =
            try table.duration("renewal_interval") ?? HATSettings.defaultRenewalInterval(idleLimit: settings.idleLimit)
        if let interval = try table.duration("key_refetch_interval") { settings.keyRefetchInterval = interval }
        guard settings.renewalInterval < settings.idleLimit else {
            throw table.error("renewal_interval", "must be shorter than idle_limit (\(DurationFormat.humanReadable(settings.idleLimit)))")
        }

        if policy.maxSessionAge == nil { policy.maxSessionAge = HATSettings.defaultMaxSessionAge }
        policy.maxTokenAge = min(policy.maxTokenAge, settings.idleLimit)
        if table.members["refresh_at"] == nil {
            policy.refreshAtFraction = min(0.9, settings.renewalInterval / policy.maxTokenAge)
        }
        // A renewed token keeps its `exp`: once only `exp` or the session end is ahead, renewing
        // cannot keep the token any longer, so its expiry ends the login.
        policy.expiryEndsSession = true
        return settings
    }

    /// An RFC 9110 field name: one or more `tchar`.
    static func isHeaderName(_ name: String) -> Bool {
        !name.isEmpty && name.utf8.count <= 128
            && name.utf8.allSatisfy { byte in
                (byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9")) || (byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "z"))
                    || (byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z")) || "!#$%&'*+-.^_`|~".utf8.contains(byte)
            }
    }
}

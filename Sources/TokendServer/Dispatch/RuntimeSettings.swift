import Synchronization
import TokendConfig
import TokendCore

/// The settings that a reload may change while connections stay open, behind one lock.
final class RuntimeSettings: Sendable {
    struct Values: Sendable {
        var accessPolicy: AccessPolicy
        var providers: [String: ProviderConfiguration]
        var callTimeout: Duration
        var tokenFiles: [String: TokenFileConfiguration] = [:]
        /// Per-uid limits for credentials and calls in flight (connections: ``ConnectionLimiter``).
        var quotas = UserQuotas()

        /// The rules for adding credentials, from the access policy and the quotas.
        var enrolmentPolicy: EnrolmentPolicy { EnrolmentPolicy(access: accessPolicy, quotas: quotas) }
    }

    private let values: Mutex<Values>

    init(_ values: Values) { self.values = Mutex(values) }

    var current: Values { values.withLock { $0 } }

    func update(_ newValues: Values) { values.withLock { $0 = newValues } }

    /// Builds the values from a configuration, resolving admin group names; names that do not
    /// resolve are returned so the caller can warn about them.
    static func values(from configuration: DaemonConfiguration) -> (Values, unresolvedAdminGroups: [String]) {
        var gids: Set<UInt32> = []
        var unresolved: [String] = []
        for name in configuration.adminGroups {
            let bare = name.hasPrefix("gid:") ? String(name.dropFirst(4)) : name
            if let gid = SystemIdentity.groupID(named: bare) { gids.insert(gid) } else { unresolved.append(name) }
        }
        let values = Values(
            accessPolicy: AccessPolicy(adminGroupIDs: gids, allowSelfEnrolment: configuration.allowSelfEnrolment),
            providers: configuration.providers,
            callTimeout: configuration.callTimeout,
            tokenFiles: configuration.tokenFiles,
            quotas: configuration.quotas
        )
        return (values, unresolved)
    }
}

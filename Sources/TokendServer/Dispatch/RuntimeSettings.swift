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
        /// What the `LoadCredential=` socket serves (`[load_credential]`).
        var loadCredential = LoadCredentialSettings()

        /// The rules for adding credentials, from the access policy, the quotas, the names token
        /// files refer to and the providers' `allow_self_enrolment`. Built per enrolment (not on
        /// any token call's path).
        var enrolmentPolicy: EnrolmentPolicy {
            EnrolmentPolicy(
                access: accessPolicy, quotas: quotas,
                reservedNames: Dictionary(
                    uniqueKeysWithValues: tokenFiles.map { name, file in
                        (name, EnrolmentPolicy.ReservedName(referredToBy: "token_files.\(name)", enrollingUIDs: file.enrollingUIDs))
                    }),
                selfEnrolment: providers.mapValues(\.allowSelfEnrolment))
        }
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
            if let gid = adminGroupID(name) { gids.insert(gid) } else { unresolved.append(name) }
        }
        let values = Values(
            accessPolicy: AccessPolicy(adminGroupIDs: gids, allowSelfEnrolment: configuration.allowSelfEnrolment),
            providers: configuration.providers,
            callTimeout: configuration.callTimeout,
            tokenFiles: configuration.tokenFiles,
            quotas: configuration.quotas,
            loadCredential: configuration.loadCredential
        )
        return (values, unresolved)
    }

    /// An `admin_groups` entry's gid: a group name, or `gid:N` / `group:NAME` in the reader
    /// grammar (``Reader``); `nil` for a name that does not resolve or a reader that is no group.
    static func adminGroupID(_ entry: String) -> UInt32? {
        guard entry.contains(":") else { return SystemIdentity.groupID(named: entry) }
        switch Reader(entry) {
        case .gid(let id): return id
        case .group(let name): return SystemIdentity.groupID(named: name)
        case .uid, .user, .unit, .exe, .combined, nil: return nil
        }
    }
}

import CTokendShims
import CoreMetrics
import Logging
import TokendConfig
import TokendCore
import TokendPostgres
import TokendStorage

#if canImport(Glibc)
    import Glibc
#endif

/// The credential store the configuration chose, with its refresh coordination.
struct OpenedStore: Sendable {
    let store: any CredentialStore
    let coordination: any RefreshCoordination
    /// Set for the shared store: its change feed runs while the daemon does.
    let shared: PostgresRefreshCoordination?
}

extension TokendDaemon {
    /// Opens the SQLite store in the state directory, or connects to the shared PostgreSQL one.
    func openStore(keyring: Keyring) async throws -> OpenedStore {
        switch configuration.store {
        case .sqlite:
            let store = try SQLiteCredentialStore(
                stateDirectory: configuration.stateDirectory, keyring: keyring,
                configuration: .init(productVersion: DaemonInfo.version))
            return OpenedStore(store: store, coordination: LocalRefreshCoordination(), shared: nil)
        case .postgresql(let settings):
            let node = configuration.nodeName ?? Self.hostName()
            let store = try await PostgresCredentialStore.open(
                settings: PostgresStoreSettings(
                    url: settings.url, password: settings.password?.value, leaseMilliseconds: settings.lease.milliseconds,
                    nodeName: node, reconcileMilliseconds: settings.reconcileInterval.milliseconds, tls: Self.tlsMode(settings.tls),
                    stateDirectory: configuration.stateDirectory
                ),
                keyring: keyring, logger: logger, productVersion: DaemonInfo.version, eventLoopGroup: group
            )
            if case .prefer = settings.tls, !store.address.isLoopback {
                // Not refused (a store that works keeps working after an upgrade), but said at
                // every start: on a network path, `prefer` lets whoever answers "no TLS" read
                // and change the store's traffic.
                logger.warning(
                    "the shared store's connection is not verified: set [store] tls = \"verify-full\" and tls_ca_file",
                    metadata: ["store": "\(store.address)"])
            }
            store.onIntegrityFailure { kind in
                Counter(label: MetricName.storeIntegrityFailures, dimensions: [("kind", kind.rawValue)]).increment()
            }
            let coordination = PostgresRefreshCoordination(store: store, productVersion: DaemonInfo.version, logger: logger)
            logger.notice(
                "sharing credentials with other nodes",
                metadata: [
                    "node": "\(node)", "store": "\(store.address)", "lease": "\(DurationFormat.humanReadable(settings.lease))",
                ])
            return OpenedStore(store: store, coordination: coordination, shared: coordination)
        }
    }

    /// Gives the allocator's free pages back to the system: reading a large store leaves what it
    /// read and checked (pages of rows, the index it built the view from) freed but held by
    /// malloc, which would count in the node's RSS for as long as it runs.
    static func returnMemoryFreedByTheLoad() {
        _ = tokend_malloc_trim()
    }

    /// Applies other nodes' changes to this node's registry until cancelled; a change of the
    /// store's health is a change of status (`STATUS=`).
    func startSharedStoreFeed(_ opened: OpenedStore, registry: CredentialRegistry, view: CredentialView) -> Task<Void, Never>? {
        guard let shared = opened.shared else { return nil }
        let logger = logger
        shared.onHealthChange { [view] in
            let health = shared.health()
            if let problem = health.problem {
                logger.error("the credential store is unavailable; serving tokens from memory", metadata: ["problem": "\(problem)"])
            } else {
                logger.notice("the credential store is available again")
            }
            view.changes.signal()
        }
        let handlers = ChangeHandlers(
            credentialsChanged: { changes in await registry.applyStoredChanges(changes) },
            reconcile: { generations in await registry.reconcile(with: generations) },
            leasesTaken: { leases in await registry.noteLeasesTakenElsewhere(leases.keys) }
        )
        return Task { await shared.run(handlers: handlers) }
    }

    /// `[store] tls` as the shared store takes it.
    static func tlsMode(_ tls: StoreTLS) -> PostgresTLSMode {
        switch tls {
        case .prefer: .prefer
        case .verifyFull(let caFile): .verifyFull(caFile: caFile)
        }
    }

    /// The host name, the default node name.
    static func hostName() -> String {
        var buffer = [CChar](repeating: 0, count: 256)
        guard gethostname(&buffer, buffer.count - 1) == 0 else { return "localhost" }
        let name = String(decoding: buffer.prefix(while: { $0 != 0 }).map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return ConfigurationParser.isValidNodeName(name) ? name : "localhost"
    }
}

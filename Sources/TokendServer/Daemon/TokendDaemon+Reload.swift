import Logging
import Synchronization
import TokendConfig
import TokendCore
import TokendSystemd

extension TokendDaemon {
    /// Applies a re-read configuration (SIGHUP, or the `Reload` method): providers, access
    /// policy, call timeout, refresh limits, token files, connection limit and log level change
    /// in place; connections and credentials stay. A file that does not load is reported in one
    /// line naming the key, and the running configuration stays in force. Reloads run one after
    /// another (``ConfigurationReloads``).
    final class Reloader: Sendable {
        private let daemon: TokendDaemon
        private let settings: RuntimeSettings
        private let registry: CredentialRegistry
        private let limiter: ConnectionLimiter
        private let administratorsLimiter: ConnectionLimiter
        /// `audit.enabled` applies at once.
        private let auditTrail: AuditTrail
        /// The configuration in force (reloads run one after another, from one loop).
        private let current: Mutex<DaemonConfiguration>

        /// The configuration in force now.
        var configuration: DaemonConfiguration { current.withLock { $0 } }

        init(
            daemon: TokendDaemon, current: DaemonConfiguration, settings: RuntimeSettings, registry: CredentialRegistry,
            limiter: ConnectionLimiter, administratorsLimiter: ConnectionLimiter, auditTrail: AuditTrail = .disabled
        ) {
            self.auditTrail = auditTrail
            self.daemon = daemon
            self.current = Mutex(current)
            self.settings = settings
            self.registry = registry
            self.limiter = limiter
            self.administratorsLimiter = administratorsLimiter
        }

        /// Reads the configuration again and applies it; returns the verdict.
        func reload() async -> ReloadVerdict {
            let logger = daemon.logger
            daemon.notifier.notify(.reloading(monotonicMicroseconds: SystemdNotifier.monotonicMicroseconds()))
            defer { daemon.notifier.notify(.ready) }
            guard let read = daemon.options.reloadConfiguration else {
                logger.notice("reload requested, but tokend runs on built-in defaults; nothing to re-read")
                let running = configuration
                return .applied(file: running.sourceFile, providers: running.providers.keys.sorted(), restartNeeded: [])
            }
            let new: DaemonConfiguration
            do {
                new = try read()
            } catch {
                logger.error("reloading the configuration failed; keeping the running configuration: \(error)")
                return .refused("\(error)")
            }
            let old = current.withLock { $0 }
            let (values, unresolvedGroups) = RuntimeSettings.values(from: new)
            for name in unresolvedGroups {
                logger.warning("admin group does not exist; it grants nothing", metadata: ["group": "\(name)"])
            }
            settings.update(values)
            await registry.reconfigure(limits: new.refreshLimits)
            limiter.setLimits(maximum: new.maxConnections, quotas: new.quotas)
            administratorsLimiter.setLimits(maximum: ConnectionLimiter.administratorsSocketMaximum(new.quotas), quotas: new.quotas)
            if let level = Logger.Level(rawValue: new.logLevel) { daemon.options.logLevel?.set(level) }
            auditTrail.setEnabled(new.audit.enabled)
            current.withLock { $0 = new }

            let needRestart = Self.restartOnlyChanges(from: old, to: new)
            if !needRestart.isEmpty {
                logger.warning(
                    "some changed settings take effect only after a restart",
                    metadata: ["settings": "\(needRestart.joined(separator: ","))"])
            }
            let added = Set(new.providers.keys).subtracting(old.providers.keys).sorted()
            let removed = Set(old.providers.keys).subtracting(new.providers.keys).sorted()
            var metadata: Logger.Metadata = [
                "file": "\(new.sourceFile ?? "built-in defaults")",
                "providers": "\(new.providers.keys.sorted().joined(separator: ","))",
            ]
            if !added.isEmpty { metadata["providers_added"] = "\(added.joined(separator: ","))" }
            if !removed.isEmpty { metadata["providers_removed"] = "\(removed.joined(separator: ","))" }
            logger.notice("configuration reloaded", metadata: metadata)
            return .applied(file: new.sourceFile, providers: new.providers.keys.sorted(), restartNeeded: needRestart)
        }

        /// Settings read only at start-up that differ between `old` and `new`.
        static func restartOnlyChanges(from old: DaemonConfiguration, to new: DaemonConfiguration) -> [String] {
            var changed: [String] = []
            if old.socketPath != new.socketPath { changed.append("daemon.socket") }
            if old.adminSocketPath != new.adminSocketPath { changed.append("daemon.admin_socket") }
            if old.loadCredentialSocketPath != new.loadCredentialSocketPath { changed.append("load_credential.socket") }
            if old.socketMode != new.socketMode { changed.append("daemon.socket_mode") }
            if old.stateDirectory != new.stateDirectory { changed.append("daemon.state_directory") }
            if old.keyFile != new.keyFile { changed.append("daemon.key_file") }
            if old.maxMessageBytes != new.maxMessageBytes { changed.append("daemon.max_message_bytes") }
            if old.maxPipelinedCalls != new.maxPipelinedCalls { changed.append("daemon.max_pipelined_calls") }
            if old.messageTimeout != new.messageTimeout { changed.append("daemon.message_timeout") }
            if old.refreshLimits.httpConnectTimeout != new.refreshLimits.httpConnectTimeout {
                changed.append("daemon.http_connect_timeout")
            }
            if old.refreshLimits.httpTimeout != new.refreshLimits.httpTimeout { changed.append("daemon.http_timeout") }
            if old.metrics != new.metrics { changed.append("metrics") }
            if old.store != new.store { changed.append("store") }
            if old.nodeName != new.nodeName { changed.append("daemon.node_name") }
            return changed
        }
    }
}

import Logging
import Synchronization

/// A log level shared by every logger of the process, so a reload can change it.
public final class LogLevelControl: Sendable {
    private let storage: Atomic<Int>

    /// - Parameter level: The initial level.
    public init(_ level: Logger.Level) {
        storage = Atomic(Self.index(of: level))
    }

    /// The current level.
    public var level: Logger.Level {
        Logger.Level.allCases[storage.load(ordering: .relaxed)]
    }

    /// Changes the level for every logger that uses this control.
    public func set(_ level: Logger.Level) {
        storage.store(Self.index(of: level), ordering: .relaxed)
    }

    private static func index(of level: Logger.Level) -> Int {
        Logger.Level.allCases.firstIndex(of: level) ?? 0
    }
}

/// Plain lines on standard error (swift-log's `StreamLogHandler`), with the shared level.
public struct StandardErrorLogHandler: LogHandler {
    private var inner: StreamLogHandler
    private let level: LogLevelControl
    private var levelOverride: Logger.Level?

    /// - Parameters:
    ///   - label: The logger's label.
    ///   - level: The shared, reloadable level.
    ///   - metadataProvider: Contextual metadata, if any.
    public init(label: String, level: LogLevelControl, metadataProvider: Logger.MetadataProvider? = nil) {
        inner = StreamLogHandler.standardError(label: label, metadataProvider: metadataProvider)
        // Logger filters by `logLevel` below; the inner handler must let everything through.
        inner.logLevel = .trace
        self.level = level
    }

    public var logLevel: Logger.Level {
        get { levelOverride ?? level.level }
        set { levelOverride = newValue }
    }

    public var metadata: Logger.Metadata {
        get { inner.metadata }
        set { inner.metadata = newValue }
    }

    public var metadataProvider: Logger.MetadataProvider? {
        get { inner.metadataProvider }
        set { inner.metadataProvider = newValue }
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { inner[metadataKey: key] }
        set { inner[metadataKey: key] = newValue }
    }

    public func log(event: LogEvent) {
        inner.log(event: event)
    }
}

/// Chooses where tokend logs: the journal when standard error is connected to it, plain lines
/// on standard error otherwise.
public enum SystemdLogging {
    /// The destination chosen for `environment`.
    public enum Destination: Sendable, Hashable {
        case journal
        case standardError
    }

    /// `.journal` when `JOURNAL_STREAM` names standard error's device and inode.
    public static func destination(environment: [String: String]) -> Destination {
        JournalFields.standardErrorIsJournal(environment: environment) ? .journal : .standardError
    }

    /// A handler factory for `LoggingSystem.bootstrap`.
    ///
    /// - Parameters:
    ///   - destination: Where to log.
    ///   - identifier: The journal's `SYSLOG_IDENTIFIER`.
    ///   - level: The shared, reloadable level.
    public static func handlerFactory(
        destination: Destination, identifier: String, level: LogLevelControl
    ) -> @Sendable (String) -> any LogHandler {
        switch destination {
        case .journal:
            return { _ in JournalLogHandler(identifier: identifier, level: level) }
        case .standardError:
            return { label in StandardErrorLogHandler(label: label, level: level) }
        }
    }
}

/// An error from the credential store, the master-key ring, or the state-directory lock.
///
/// Match on ``code``; the ``message`` is for people. Neither the message nor the ``description``
/// ever contains a token or key material: messages name users, providers, paths and key ids only.
/// Two errors are equal when their codes are equal.
public struct StorageError: Error, CustomStringConvertible {
    /// What went wrong, as a stable, matchable value.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Base: String, Hashable, Sendable {
            case alreadyExists
            case notFound
            case conflict
            case keyFile
            case decryption
            case unknownKey
            case database
            case locked
            case rotationRefused
            case closed
            case fileSystem
            case corruptRecord
            case unsupported
            case integrity
        }

        private let base: Base
        private init(_ base: Base) { self.base = base }

        /// `insert` without `replacing` found a credential for this user identifier.
        public static var alreadyExists: Code { Code(.alreadyExists) }
        /// There is no credential for this user identifier (any more).
        public static var notFound: Code { Code(.notFound) }
        /// A compare-and-swap write found a newer generation than the one expected: someone else
        /// wrote the credential since the caller read it.
        public static var conflict: Code { Code(.conflict) }
        /// The master-key file or systemd credential is missing, unsafe, or malformed.
        public static var keyFile: Code { Code(.keyFile) }
        /// A sealed token failed to open: altered, moved to another row or column, or malformed.
        public static var decryption: Code { Code(.decryption) }
        /// A sealed token names a master key that is not in the keyring.
        public static var unknownKey: Code { Code(.unknownKey) }
        /// SQLite reported an error, or the database is of a newer schema than this build knows.
        public static var database: Code { Code(.database) }
        /// Another process holds the state directory's lock.
        public static var locked: Code { Code(.locked) }
        /// Key rotation is not possible here (read-only key source, or one already running).
        public static var rotationRefused: Code { Code(.rotationRefused) }
        /// The store was closed.
        public static var closed: Code { Code(.closed) }
        /// A file or directory operation failed (creating the state directory, fsync, …).
        public static var fileSystem: Code { Code(.fileSystem) }
        /// A stored row holds a value this build cannot interpret (e.g. an unknown state).
        public static var corruptRecord: Code { Code(.corruptRecord) }
        /// This kind of store cannot do that (an online backup of the shared store: `pg_dump`).
        public static var unsupported: Code { Code(.unsupported) }
        /// A stored row fails its authentication with the master key (edited outside tokend) or
        /// is older than one already seen (rolled back): it is refused and grants nothing.
        public static var integrity: Code { Code(.integrity) }

        public var description: String { base.rawValue }
    }

    /// What went wrong.
    public var code: Code
    /// A one-line, secret-free explanation naming what failed and, where it helps, what to do.
    public var message: String
    /// The error that caused this one, if any (a GRDB `DatabaseError`, a crypto error, …).
    public var underlying: (any Error)?
    /// Where the error was raised, for diagnostics.
    public var file: String
    /// Where the error was raised, for diagnostics.
    public var line: Int

    /// Creates an error.
    ///
    /// - Parameters:
    ///   - code: What went wrong.
    ///   - message: A secret-free explanation.
    ///   - underlying: The cause, if any. Its `description` is shown after the message, so pass
    ///     only errors whose description cannot contain a secret.
    public init(
        code: Code,
        message: String,
        underlying: (any Error)? = nil,
        file: String = #fileID,
        line: Int = #line
    ) {
        self.code = code
        self.message = message
        self.underlying = underlying
        self.file = file
        self.line = line
    }

    public var description: String {
        guard let underlying else { return message }
        return "\(message) (\(String(describing: underlying)))"
    }
}

extension StorageError: Equatable {
    /// Compares codes only, so `error == StorageError(code: .conflict, …)` reads naturally in tests.
    public static func == (lhs: StorageError, rhs: StorageError) -> Bool { lhs.code == rhs.code }
}

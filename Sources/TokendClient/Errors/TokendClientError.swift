import TokendJSON

/// An error from a call to tokend: a Varlink error reply, or a failure to reach the daemon.
///
/// Errors compare equal when their ``code`` is equal, so `catch let error where error.code ==
/// .unknownUser` and `#expect(throws: TokendClientError(code: .timeout))` read naturally.
///
/// The ``message`` and ``description`` never contain a token: strings the daemon sent back are
/// stripped of control characters, shortened, and scrubbed of every secret the call carried.
public struct TokendClientError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What kind of failure this is. New codes may be added; switch with a `default`.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        fileprivate enum Base: String, Hashable, Sendable {
            case unknownUser, permissionDenied, reauthenticationRequired, refreshFailed
            case credentialExists, unknownProvider, invalidCredential, storageFailed, keyRotationUnavailable, configurationInvalid
            case invalidParameter, methodNotFound, expectedMore
            case loginFailed, unknownLogin, quotaExceeded
            case daemonUnavailable, timeout, cancelled, protocolError, other
        }

        fileprivate var base: Base

        fileprivate init(_ base: Base) { self.base = base }

        /// tokend has no credential for the user identifier.
        public static let unknownUser = Code(.unknownUser)
        /// The caller may not perform the call (or read that credential), or may not connect to
        /// the socket at all.
        public static let permissionDenied = Code(.permissionDenied)
        /// The login has ended; only a new login (a new `AddCredential`) helps.
        public static let reauthenticationRequired = Code(.reauthenticationRequired)
        /// tokend could not get a fresh enough token; it may succeed later (see `retryAt`).
        public static let refreshFailed = Code(.refreshFailed)
        /// A per-uid limit of the daemon refused the call or the connection (``TokendClientError/parameters``
        /// has `quota` and `limit`).
        public static let quotaExceeded = Code(.quotaExceeded)
        /// `AddCredential` without `replace` for a user that already has a credential.
        public static let credentialExists = Code(.credentialExists)
        /// The provider named in `AddCredential` is not configured.
        public static let unknownProvider = Code(.unknownProvider)
        /// tokend refused the token response given to `AddCredential`.
        public static let invalidCredential = Code(.invalidCredential)
        /// tokend's credential store failed.
        public static let storageFailed = Code(.storageFailed)
        /// `RotateKey` cannot run (e.g. the key comes from systemd credentials).
        public static let keyRotationUnavailable = Code(.keyRotationUnavailable)
        /// `Reload` refused the configuration file (the message names the key); tokend keeps the
        /// configuration it had.
        public static let configurationInvalid = Code(.configurationInvalid)
        /// A login did not produce a credential (denied, expired, a redirect that does not
        /// belong to it, a token that failed verification); see the message and `oauthError`.
        public static let loginFailed = Code(.loginFailed)
        /// No login with that id is waiting for this caller (expired, completed or cancelled).
        public static let unknownLogin = Code(.unknownLogin)
        /// A parameter was missing, mistyped or invalid (`org.varlink.service.InvalidParameter`),
        /// or the client refused to send it.
        public static let invalidParameter = Code(.invalidParameter)
        /// The daemon does not know the method or interface (`MethodNotFound`,
        /// `InterfaceNotFound`, `MethodNotImplemented`).
        public static let methodNotFound = Code(.methodNotFound)
        /// The method must be called with `more`.
        public static let expectedMore = Code(.expectedMore)
        /// tokend is not running, or the connection to it was lost.
        public static let daemonUnavailable = Code(.daemonUnavailable)
        /// tokend did not answer within the call timeout.
        public static let timeout = Code(.timeout)
        /// The calling task was cancelled before the reply arrived.
        public static let cancelled = Code(.cancelled)
        /// The daemon sent something that is not a valid reply to the call.
        public static let protocolError = Code(.protocolError)
        /// Any other Varlink error.
        public static let other = Code(.other)

        public var description: String { base.rawValue }
    }

    /// What kind of failure this is.
    public var code: Code
    /// A human-readable explanation naming the user, provider or method concerned; never a token.
    public var message: String
    /// The fully qualified Varlink error name, when the daemon answered with an error.
    public var errorName: String?
    /// The Varlink error's parameters (with every secret the call carried redacted).
    public var parameters: JSONObject
    /// The fully qualified method of the call that failed, when there was one.
    public var method: String?
    /// The underlying error (e.g. the socket error), when there is one.
    public var cause: (any Error)?
    /// Where in the client the error was raised.
    public var file: String
    /// Where in the client the error was raised.
    public var line: Int

    /// The call never reached the daemon (its connection was already closed), so it is safe to
    /// send again on a fresh connection.
    var wasNotSent = false

    /// Creates an error.
    /// - Parameters:
    ///   - code: the kind of failure.
    ///   - message: a human-readable explanation; it must not contain a token.
    ///   - errorName: the Varlink error name, if any.
    ///   - parameters: the Varlink error parameters, if any.
    ///   - method: the method of the failed call, if any.
    ///   - cause: the underlying error, if any.
    public init(
        code: Code,
        message: String = "",
        errorName: String? = nil,
        parameters: JSONObject = [:],
        method: String? = nil,
        cause: (any Error)? = nil,
        file: String = #fileID,
        line: Int = #line
    ) {
        self.code = code
        self.message = message.isEmpty ? "tokend call failed (\(code))" : message
        self.errorName = errorName
        self.parameters = parameters
        self.method = method
        self.cause = cause
        self.file = file
        self.line = line
    }

    public var description: String { message }

    /// The `userIdentifier` parameter of the Varlink error, when it has one.
    public var userIdentifier: String? { parameters["userIdentifier"]?.stringValue }

    /// Whether the error means the credential cannot be used any more (removed, needs a new
    /// login, or not readable by this caller), so a cached token of it must not be served.
    var endsCredential: Bool {
        code == .unknownUser || code == .reauthenticationRequired || code == .permissionDenied
    }

    /// For ``Code/refreshFailed``: when tokend will try again, in seconds since the epoch.
    public var retryAt: Int64? { parameters["retryAt"]?.int64Value }

    public static func == (lhs: TokendClientError, rhs: TokendClientError) -> Bool { lhs.code == rhs.code }

    public func hash(into hasher: inout Hasher) { hasher.combine(code) }
}

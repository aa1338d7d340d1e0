import TokendClient

/// The exit statuses of `tokenctl`, one per kind of failure, so scripts can tell "the daemon is
/// down" from "this user needs to log in again".
///
/// They live in the library so the mapping is tested and other command-line tools built on
/// ``TokendClient`` can use the same numbers.
public enum TokenctlExitStatus {
    public static let success: Int32 = 0
    /// Any failure without a status of its own.
    public static let other: Int32 = 1
    /// Bad arguments, or input (stdin, `--from-file`) that is not what was expected.
    public static let usage: Int32 = 2
    public static let daemonUnavailable: Int32 = 3
    public static let unknownUser: Int32 = 4
    public static let permissionDenied: Int32 = 5
    public static let reauthenticationRequired: Int32 = 6
    public static let refreshFailed: Int32 = 7
    public static let timeout: Int32 = 8
    public static let credentialExists: Int32 = 9
    public static let unknownProvider: Int32 = 10
    public static let invalidCredential: Int32 = 11
    public static let loginFailed: Int32 = 12
    public static let quotaExceeded: Int32 = 13

    /// Every status and what it means, in order, for `--help`.
    public static let table: [(status: Int32, meaning: String)] = [
        (success, "success"),
        (other, "any other error"),
        (usage, "usage error or invalid input"),
        (daemonUnavailable, "tokend is not running or the connection was lost"),
        (unknownUser, "tokend has no credential for the user"),
        (permissionDenied, "permission denied"),
        (reauthenticationRequired, "the login has ended; a new login is needed"),
        (refreshFailed, "tokend could not get a fresh enough token (try again later)"),
        (timeout, "tokend did not answer in time"),
        (credentialExists, "add: the user already has a credential (use --replace)"),
        (unknownProvider, "add: no such provider in tokend's configuration"),
        (invalidCredential, "add: tokend refused the token response"),
        (loginFailed, "login: the login was denied, expired or failed verification"),
        (quotaExceeded, "a per-user limit of tokend was reached (connections, credentials, calls)"),
    ]

    /// The exit status for a failed call.
    /// - Parameter error: the error.
    /// - Returns: its status from ``table``.
    public static func status(for error: TokendClientError) -> Int32 {
        switch error.code {
        case .daemonUnavailable: daemonUnavailable
        case .unknownUser: unknownUser
        case .permissionDenied: permissionDenied
        case .reauthenticationRequired: reauthenticationRequired
        case .refreshFailed: refreshFailed
        case .timeout: timeout
        case .credentialExists: credentialExists
        case .unknownProvider: unknownProvider
        case .invalidCredential: invalidCredential
        case .loginFailed, .unknownLogin: loginFailed
        case .quotaExceeded: quotaExceeded
        case .invalidParameter: usage
        default: other
        }
    }

    /// The table as help text: one `  N  meaning` line per status.
    public static var helpText: String {
        table.map { "  \($0.status < 10 ? " " : "")\($0.status)  \($0.meaning)" }.joined(separator: "\n")
    }
}

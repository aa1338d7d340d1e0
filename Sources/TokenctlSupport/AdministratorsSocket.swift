import TokendClient

/// Which administrators' socket `tokenctl` tries before the public one: as root, the one beside
/// the socket it would use (`PATH.admin`, where tokend puts it by default), so that a flood of
/// the public socket by other users does not delay an administrator; none for other users (they
/// cannot connect to it) or when `--socket` names a socket (then exactly that one is used).
/// A socket that cannot be connected to (none there, an older tokend) falls back to the public one.
public enum AdministratorsSocket {
    /// What the administrators' socket's path adds to the public one's.
    public static let suffix = ".admin"

    /// - Parameters:
    ///   - explicitSocket: `--socket`, if given.
    ///   - environmentSocket: `$TOKEND_SOCKET`, if set.
    ///   - effectiveUID: tokenctl's effective uid.
    /// - Returns: The socket to try first, or `nil`.
    public static func path(explicitSocket: String?, environmentSocket: String?, effectiveUID: UInt32) -> String? {
        guard effectiveUID == 0, explicitSocket == nil else { return nil }
        return TokendClient.socketPath(environment: environmentSocket) + suffix
    }
}

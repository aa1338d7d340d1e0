/// What a listening socket is for: who may connect to it, the name the service manager passes
/// it under (`FileDescriptorName=` in its socket unit, read from `LISTEN_FDNAMES`), and the file
/// mode tokend gives it when it binds it itself.
///
/// Each role is one socket; a role is added by a case here, its unit in `systemd/`, its
/// configuration key and what its connections run (``SocketListener`` for the Varlink roles).
enum SocketRole: String, Sendable, CaseIterable {
    /// `io.tokend`: every local user may connect (`daemon.socket_mode`); each call is authorised.
    case varlink
    /// The administrators' socket (`daemon.admin_socket`, `tokend-admin.socket`): root only by its
    /// file mode, a connection of anyone who is not an administrator refused at accept, and
    /// connections of its own, outside `max_connections`. No other user's connections queue in
    /// its accept queue, so a flood of the public socket does not delay an administrator here.
    case administrators
    /// systemd's `LoadCredential=ID:/path` (`load_credential.socket`, `tokend-credential.socket`):
    /// not Varlink, one token per connection to the service manager reading a unit's credential
    /// (``LoadCredentialService``). Root only by its file mode; off unless configured or passed.
    case loadCredential

    /// The name systemd passes the socket under.
    var descriptorName: String {
        switch self {
        case .varlink: "varlink"
        case .administrators: "admin"
        case .loadCredential: "credential"
        }
    }

    /// The role of a socket passed under `name`: the administrators' or the `LoadCredential=`
    /// socket by its name; any other name (the socket unit's own name by default, or none) is the
    /// public socket, as before sockets had names.
    static func passed(named name: String?) -> SocketRole {
        switch name {
        case SocketRole.administrators.descriptorName?: .administrators
        case SocketRole.loadCredential.descriptorName?: .loadCredential
        default: .varlink
        }
    }

    /// The configuration key of the socket's path, as the ready line names it.
    var logKey: String {
        switch self {
        case .varlink: "socket"
        case .administrators: "admin_socket"
        case .loadCredential: "load_credential_socket"
        }
    }

    /// The administrators' socket's mode when tokend binds it: its owner (tokend's user; root
    /// when tokend runs as root) and root, who may connect to any socket.
    static let administratorsMode: UInt32 = 0o600
    /// The `LoadCredential=` socket's: the same; only the service manager (root) needs it.
    static let loadCredentialMode: UInt32 = 0o600
}

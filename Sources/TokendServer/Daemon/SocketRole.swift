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

    /// The name systemd passes the socket under.
    var descriptorName: String {
        switch self {
        case .varlink: "varlink"
        case .administrators: "admin"
        }
    }

    /// The role of a socket passed under `name`: the administrators' by its name; any other
    /// name (the socket unit's own name by default, or none) is the public socket, as before
    /// sockets had names.
    static func passed(named name: String?) -> SocketRole {
        name == SocketRole.administrators.descriptorName ? .administrators : .varlink
    }

    /// The administrators' socket's mode when tokend binds it: its owner (tokend's user; root
    /// when tokend runs as root) and root, who may connect to any socket.
    static let administratorsMode: UInt32 = 0o600
}

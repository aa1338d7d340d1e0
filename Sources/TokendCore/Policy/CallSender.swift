/// Which process wrote a call, as the kernel stamped its bytes (`SCM_CREDENTIALS`, asked for with
/// `SO_PASSCRED` on the listening socket): program readers are decided about that process only.
///
/// A connection is a descriptor, and the process that opened it can hand it on (`fork`, `exec`,
/// `SCM_RIGHTS`). uid and group readers keep the identity of the process that connected (as
/// `SO_PEERCRED` does); a program reader grants only a call written by the process that
/// connected, whose program tokend checks.
public enum CallSender: Sendable, Hashable, CustomStringConvertible {
    /// Every byte of the call was written by the process that connected.
    case connector(pid: Int32)
    /// Some byte was written by another process (`pid` as tokend sees it; 0 where it cannot).
    case anotherProcess(pid: Int32, connector: Int32)
    /// Not known: the bytes were read while no credential had a program reader (nothing traced
    /// them), or the kernel did not stamp them.
    case unknown

    public var description: String {
        switch self {
        case .connector(let pid): "pid \(pid), the process that connected"
        case .anotherProcess(let pid, let connector):
            "the call was sent by pid \(pid), not by the process that connected (pid \(connector))"
        case .unknown: "the process that sent the call is not known (reconnect)"
        }
    }
}

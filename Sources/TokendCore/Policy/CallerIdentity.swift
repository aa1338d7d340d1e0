/// Who is on the other end of a connection, as the kernel reports it (`SO_PEERCRED` for uid,
/// gid and pid; `SO_PEERGROUPS` for supplementary groups), captured when the connection is
/// accepted.
public struct CallerIdentity: Sendable, Hashable, CustomStringConvertible {
    public var uid: UInt32
    public var gid: UInt32
    public var pid: Int32
    public var supplementaryGroups: [UInt32]

    public init(uid: UInt32, gid: UInt32, pid: Int32, supplementaryGroups: [UInt32] = []) {
        self.uid = uid
        self.gid = gid
        self.pid = pid
        self.supplementaryGroups = supplementaryGroups
    }

    /// Whether the caller holds `gid` as its primary or a supplementary group.
    public func isMember(of gid: UInt32) -> Bool {
        self.gid == gid || supplementaryGroups.contains(gid)
    }

    public var description: String { "uid=\(uid) gid=\(gid) pid=\(pid)" }
}

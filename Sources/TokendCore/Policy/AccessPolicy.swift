/// The authorization rules for every call: who may read a credential, who is an administrator,
/// and who may enrol or remove a credential for themselves.
///
/// Pure: the daemon hands it the caller's identity (from the kernel) and the credential's
/// resolved readers, and carries out the decision.
public struct AccessPolicy: Sendable, Hashable {
    /// Members of these groups (and root) may call administrative methods.
    public var adminGroupIDs: Set<UInt32>
    /// Whether a non-administrator may add and remove credentials whose only reader is their
    /// own uid.
    public var allowSelfEnrolment: Bool

    public init(adminGroupIDs: Set<UInt32> = [], allowSelfEnrolment: Bool = true) {
        self.adminGroupIDs = adminGroupIDs
        self.allowSelfEnrolment = allowSelfEnrolment
    }

    /// Root, or a member of an admin group.
    public func isAdmin(_ caller: CallerIdentity) -> Bool {
        caller.uid == 0 || adminGroupIDs.contains(where: caller.isMember(of:))
    }

    /// Whether `caller` may receive the access token of a credential with these readers.
    /// Administrators do not read other users' tokens implicitly: reading is granted only by
    /// the reader list, so an admin that needs a token names itself as a reader.
    public func mayRead(_ caller: CallerIdentity, readers: ResolvedReaders) -> Bool {
        if readers.uids.contains(caller.uid) { return true }
        return readers.gids.contains(where: caller.isMember(of:))
    }

    /// Whether `caller` may see a credential's status (metadata only, never a token).
    public func mayInspect(_ caller: CallerIdentity, readers: ResolvedReaders) -> Bool {
        isAdmin(caller) || mayRead(caller, readers: readers)
    }

    /// Whether `caller` may add a credential with `readers`, or replace or remove one whose
    /// readers are `readers`.
    public func mayManage(_ caller: CallerIdentity, readers: [Reader]) -> Bool {
        if isAdmin(caller) { return true }
        guard allowSelfEnrolment else { return false }
        return readers == [.uid(caller.uid)]
    }
}

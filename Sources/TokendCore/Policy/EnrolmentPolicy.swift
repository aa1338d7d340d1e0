/// Who may put a credential under a user identifier: the one set of rules `AddCredential` and
/// `BeginLogin` (and the credential a login stores) share.
///
/// - The new credential's readers are the ones requested, or the caller's own uid.
/// - The caller must be allowed to manage a credential with those readers (an admin, or a user
///   for themself).
/// - If a credential exists already, the caller must be allowed to manage that one too, and
///   this is checked before whether it asked to replace it: a caller who may not manage it
///   learns nothing about it, not even that it exists.
/// - A non-administrator holds at most ``UserQuotas/credentialsPerUID`` credentials for
///   themself, counting adds not yet stored.
///
/// Pure: the caller passes in what the view holds; the server maps refusals to Varlink errors.
public struct EnrolmentPolicy: Sendable {
    public var access: AccessPolicy
    public var quotas: UserQuotas

    public init(access: AccessPolicy, quotas: UserQuotas) {
        self.access = access
        self.quotas = quotas
    }

    /// The readers a new credential gets: the requested ones, or the caller's uid.
    ///
    /// - Throws: ``EnrolmentRefusal/invalidReaders`` for an unknown reader or an empty list.
    public static func readers(requested texts: [String]?, caller: CallerIdentity) throws(EnrolmentRefusal) -> [Reader] {
        guard let texts else { return [.uid(caller.uid)] }
        var readers: [Reader] = []
        for text in texts {
            guard let reader = Reader(text) else { throw .invalidReaders }
            readers.append(reader)
        }
        guard !readers.isEmpty else { throw .invalidReaders }
        return readers
    }

    /// Whether the caller may enrol a credential read by `readers`, before anything else is
    /// known (the first check, made before a login sends the user anywhere).
    public func checkReaders(_ readers: [Reader], caller: CallerIdentity) throws(EnrolmentRefusal) {
        guard access.mayManage(caller, readers: readers) else { throw .notPermitted }
    }

    /// Whether the credential may take its place: over `existing` (the readers of the credential
    /// stored under the identifier now, nil if none) and within the caller's quota.
    ///
    /// - Parameters:
    ///   - replace: the caller asked to replace an existing credential.
    ///   - held: credentials held for the caller's uid alone, other than the one under this
    ///     identifier (a replacement keeps the count), plus the caller's adds not yet stored.
    public func checkPlacement(existing: [Reader]?, replace: Bool, held: Int, caller: CallerIdentity) throws(EnrolmentRefusal) {
        if let existing {
            guard access.mayManage(caller, readers: existing) else { throw .notPermitted }
            guard replace else { throw .exists }
        }
        guard !access.isAdmin(caller) else { return }
        if let refusal = quotas.admitCredential(held: held, isAdmin: false) { throw .quota(refusal) }
    }
}

/// Why an enrolment was refused.
public enum EnrolmentRefusal: Error, Sendable, Hashable {
    /// A requested reader is not a uid or group the host knows, or the list is empty.
    case invalidReaders
    /// The caller may not manage a credential with these readers (or the existing one).
    case notPermitted
    /// A credential exists under the identifier and the caller did not ask to replace it.
    case exists
    /// The caller holds as many credentials as their quota allows.
    case quota(QuotaRefusal)
}

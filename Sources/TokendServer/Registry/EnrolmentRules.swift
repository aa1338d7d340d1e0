import TokendCore
import TokendProtocol

/// Who may put a credential under a user identifier: the rules `AddCredential` and
/// `BeginLogin` share.
///
/// - The new credential's readers are the ones requested, or the caller's own uid.
/// - The caller must be allowed to manage a credential with those readers (an admin, or a user
///   for themself).
/// - If a credential exists already, the caller must be allowed to manage that one too, and
///   this is checked before whether it asked to replace it: a caller who may not manage it
///   learns nothing about it, not even that it exists.
enum EnrolmentRules {
    /// The readers a new credential gets.
    ///
    /// - Throws: `InvalidParameter("readers")` for an unknown reader or an empty list.
    static func readers(requested texts: [String]?, caller: CallerIdentity) throws(VarlinkError) -> [Reader] {
        guard let texts else { return [.uid(caller.uid)] }
        var readers: [Reader] = []
        for text in texts {
            guard let reader = Reader(text) else { throw .invalidParameter("readers") }
            readers.append(reader)
        }
        guard !readers.isEmpty else { throw .invalidParameter("readers") }
        return readers
    }

    /// Whether the caller may take over `existing` (nil: there is none).
    ///
    /// - Throws: `PermissionDenied` (after calling `denied`, for the log) or `CredentialExists`.
    static func checkExisting(
        _ existing: [Reader]?, user: String, replace: Bool, caller: CallerIdentity, policy: AccessPolicy, denied: () -> Void
    ) throws(VarlinkError) {
        guard let existing else { return }
        guard policy.mayManage(caller, readers: existing) else {
            denied()
            throw .permissionDenied(user)
        }
        guard replace else { throw .credentialExists(user) }
    }

    /// Whether a non-administrator may hold one more credential: those held for their uid
    /// alone (other than `user`, which a replacement keeps at one), plus `pending` adds not yet
    /// stored, against ``UserQuotas/credentialsPerUID``.
    ///
    /// - Throws: `QuotaExceeded` (after calling `refused`, for the log).
    static func checkQuota(
        user: String, caller: CallerIdentity, policy: AccessPolicy, quotas: UserQuotas, view: CredentialView, pending: Int = 0,
        refused: (QuotaRefusal) -> Void
    ) throws(VarlinkError) {
        guard !policy.isAdmin(caller) else { return }
        let held = view.countHeld(by: caller.uid, excluding: user) + pending
        guard let refusal = quotas.admitCredential(held: held, isAdmin: false) else { return }
        refused(refusal)
        throw .quotaExceeded(refusal.quota.rawValue, limit: refusal.limit, userIdentifier: user)
    }
}

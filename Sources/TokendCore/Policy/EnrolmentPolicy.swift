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
/// - A name that administrator configuration refers to (a token file's credential) is enrolled,
///   replaced and removed only by administrators and the uids that configuration names
///   (``reservedNames``): otherwise any user could feed the consuming service a token of their
///   choosing under a name not enrolled yet.
/// - A provider may forbid self-enrolment (``selfEnrolment``): an `exec` provider's command runs
///   with tokend's authority, so by default only administrators enrol credentials for it.
///
/// Pure: the caller passes in what the view holds; the server maps refusals to Varlink errors.
public struct EnrolmentPolicy: Sendable {
    public var access: AccessPolicy
    public var quotas: UserQuotas
    /// Names that administrator configuration refers to, by name.
    public var reservedNames: [String: ReservedName]
    /// Whether non-administrators may enrol credentials for a provider, by provider name (a
    /// provider not listed: allowed, as ``AccessPolicy/allowSelfEnrolment`` decides).
    public var selfEnrolment: [String: Bool]

    public init(
        access: AccessPolicy, quotas: UserQuotas, reservedNames: [String: ReservedName] = [:], selfEnrolment: [String: Bool] = [:]
    ) {
        self.access = access
        self.quotas = quotas
        self.reservedNames = reservedNames
        self.selfEnrolment = selfEnrolment
    }

    /// A user identifier that the configuration refers to.
    public struct ReservedName: Sendable, Hashable {
        /// What refers to it, for the refusal's message (e.g. `token_files.backup`).
        public var referredToBy: String
        /// The uids besides administrators that may enrol, replace and remove it.
        public var enrollingUIDs: Set<UInt32>

        public init(referredToBy: String, enrollingUIDs: Set<UInt32>) {
            self.referredToBy = referredToBy
            self.enrollingUIDs = enrollingUIDs
        }
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

    /// Whether the caller may enrol a credential for `provider` read by `readers` under `user`,
    /// before anything else is known (the first check, made before a login sends the user
    /// anywhere).
    public func checkEnrolment(user: String, provider: String, readers: [Reader], caller: CallerIdentity) throws(EnrolmentRefusal) {
        try checkName(user, caller: caller)
        if !access.isAdmin(caller), selfEnrolment[provider] == false { throw .providerForbidsSelfEnrolment(provider: provider) }
        guard access.mayManage(caller, readers: readers) else { throw .notPermitted }
    }

    /// Whether the caller may remove the credential `user` read by `readers`.
    public func checkRemoval(user: String, readers: [Reader], caller: CallerIdentity) throws(EnrolmentRefusal) {
        guard access.mayManage(caller, readers: readers) else { throw .notPermitted }
        try checkName(user, caller: caller)
    }

    /// Refuses a name the configuration refers to unless the caller is an administrator or a
    /// uid the configuration names.
    private func checkName(_ user: String, caller: CallerIdentity) throws(EnrolmentRefusal) {
        guard let reserved = reservedNames[user], !access.isAdmin(caller), !reserved.enrollingUIDs.contains(caller.uid) else { return }
        throw .reservedName(referredToBy: reserved.referredToBy)
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
    /// The name is one the configuration refers to (`referredToBy`, e.g. `token_files.backup`)
    /// and the caller is neither an administrator nor a uid it names.
    case reservedName(referredToBy: String)
    /// The provider allows only administrators to enrol its credentials.
    case providerForbidsSelfEnrolment(provider: String)
}

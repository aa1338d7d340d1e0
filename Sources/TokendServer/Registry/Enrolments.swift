import Logging
import TokendCore
import TokendProtocol

/// ``EnrolmentPolicy`` as `AddCredential` and `BeginLogin` apply it: the adds in progress
/// counted against the quota, refusals logged and answered as Varlink errors.
///
/// Owned by ``CredentialRegistry``, whose actor serialises it; a login checks through
/// ``CredentialRegistry/checkLoginEnrolment(_:caller:)``, so both paths count the same
/// pending adds.
struct Enrolments {
    /// Adds by non-administrators between their quota check and their store write, per uid, so
    /// that concurrent adds cannot pass the credential quota together.
    private(set) var pending: [UInt32: Int] = [:]
    /// One journal line a minute per uid whose enrolments the quota refuses.
    private var quotaReports = RefusalReports()
    let logger: Logger

    init(logger: Logger) { self.logger = logger }

    /// The first checks, made before anything is verified, stored or sent: the identifier, the
    /// provider, the readers and whether the caller may manage a credential with them.
    ///
    /// - Parameter action: what the caller is doing, for the journal (`add`, `login`).
    /// - Returns: the new credential's readers.
    func admit(
        user: String, provider: String, readers requested: [String]?, caller: CallerIdentity, settings: RuntimeSettings.Values,
        action: String
    ) throws(VarlinkError) -> [Reader] {
        guard Identifier.isValid(user) else { throw .invalidParameter("userIdentifier") }
        guard settings.providers[provider] != nil else { throw .unknownProvider(provider) }
        do throws(EnrolmentRefusal) {
            let readers = try EnrolmentPolicy.readers(requested: requested, caller: caller)
            try settings.enrolmentPolicy.checkEnrolment(user: user, provider: provider, readers: readers, caller: caller)
            return readers
        } catch {
            throw answer(error, user: user, caller: caller, action: action)
        }
    }

    /// The checks against what is held now: the credential stored under `user` (if any) and
    /// the caller's quota, counting the caller's adds still in progress.
    ///
    /// - Parameter replace: the caller asked to replace an existing credential.
    mutating func place(
        user: String, replace: Bool, caller: CallerIdentity, settings: RuntimeSettings.Values, view: CredentialView, action: String
    ) throws(VarlinkError) {
        let policy = settings.enrolmentPolicy
        let held = policy.access.isAdmin(caller) ? 0 : view.countHeld(by: caller.uid, excluding: user) + pending[caller.uid, default: 0]
        do throws(EnrolmentRefusal) {
            try policy.checkPlacement(existing: view[user]?.readers, replace: replace, held: held, caller: caller)
        } catch {
            if case .quota(let refusal) = error { logQuota(caller, refusal: refusal, user: user) }
            throw answer(error, user: user, caller: caller, action: action)
        }
    }

    /// Counts an add that passed ``place(user:replace:caller:settings:view:action:)`` until
    /// it is stored or fails (``release(_:)``).
    mutating func reserve(_ caller: CallerIdentity) { pending[caller.uid, default: 0] += 1 }

    mutating func release(_ caller: CallerIdentity) { pending.decrementCount(caller.uid) }

    private func answer(_ refusal: EnrolmentRefusal, user: String, caller: CallerIdentity, action: String) -> VarlinkError {
        func denied(_ reason: String) -> VarlinkError {
            logDenied(caller, action: action, user: user)
            return .permissionDenied(user, reason: reason)
        }
        switch refusal {
        case .invalidReaders:
            return .invalidParameter("readers")
        case .notPermitted:
            logDenied(caller, action: action, user: user)
            return .permissionDenied(user)
        case .exists:
            return .credentialExists(user)
        case .quota(let quota):
            return .quotaExceeded(quota.quota.rawValue, limit: quota.limit, userIdentifier: user)
        case .reservedName(let referredToBy):
            return denied(
                "'\(user)' is written to a token file (\(referredToBy)); only administrators and the uids in its enrolling_uids may enrol, replace or remove it"
            )
        case .providerForbidsSelfEnrolment(let provider):
            return denied(
                "provider '\(provider)' does not allow self-enrolment: only administrators may enrol its credentials (allow_self_enrolment in its section)"
            )
        }
    }

    /// Whether `caller` may remove `user`'s credential, read by `readers`.
    func checkRemoval(user: String, readers: [Reader], caller: CallerIdentity, settings: RuntimeSettings.Values) throws(VarlinkError) {
        do throws(EnrolmentRefusal) {
            try settings.enrolmentPolicy.checkRemoval(user: user, readers: readers, caller: caller)
        } catch {
            throw answer(error, user: user, caller: caller, action: "remove")
        }
    }

    /// A refused request to manage `user`'s credential, for the journal.
    func logDenied(_ caller: CallerIdentity, action: String, user: String) {
        logger.notice(
            "permission denied",
            metadata: [
                "uid": "\(caller.uid)", "gid": "\(caller.gid)", "pid": "\(caller.pid)", "action": "\(action)", "user_identifier": "\(user)",
            ])
    }

    /// A refused enrolment, logged once a minute per uid at most (a flood is one line).
    private mutating func logQuota(_ caller: CallerIdentity, refusal: QuotaRefusal, user: String) {
        let refused = quotaReports.record(uid: caller.uid, now: .now)
        guard refused > 0 else { return }
        logger.notice(
            "credential refused: per-user limit reached",
            metadata: [
                "uid": "\(caller.uid)", "pid": "\(caller.pid)", "quota": "\(refusal.quota.rawValue)", "limit": "\(refusal.limit)",
                "user_identifier": "\(user)", "refused": "\(refused)",
            ])
    }
}

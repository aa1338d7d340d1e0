/// A login under a user identifier that already has a credential: a renewal in place, a
/// replacement, or a refusal.
///
/// `tokenctl login USER` on an existing credential renews it: the new tokens go under the same
/// name, with the same readers, owner and provider, so token-file bindings, narrowed-token
/// settings and `Watch` subscribers stay attached. Only the credential's owner (the uid that
/// enrolled it) or an administrator may renew. Anyone else gets the refusal they would get for a
/// replacement, so a renewal attempt tells nobody more than a replacement does about a name.
///
/// Pure: the server passes in what it holds and carries out the decision.
public enum LoginRenewal {
    /// What a login under an existing name does.
    public enum Placement: Sendable, Hashable {
        /// No credential under the name: a new one.
        case new
        /// `replace` was asked: a new credential (its own readers) takes the name.
        case replace
        /// The credential's tokens are renewed, everything else is kept.
        case renew
    }

    /// What the server knows of the credential under the name.
    public struct Existing: Sendable, Hashable {
        public var provider: String
        public var readers: [Reader]
        /// The uid that enrolled it: its owner.
        public var ownerUID: UInt32

        public init(provider: String, readers: [Reader], ownerUID: UInt32) {
            self.provider = provider
            self.readers = readers
            self.ownerUID = ownerUID
        }
    }

    /// Why a renewal was refused, beyond the enrolment refusals.
    public enum Refusal: Error, Sendable, Hashable {
        /// The rules of a replacement refused it (not permitted, or exists without `replace`).
        case enrolment(EnrolmentRefusal)
        /// The caller may manage the credential but is neither its owner nor an administrator.
        case notOwner
        /// The login names another provider than the credential's.
        case otherProvider(String)
        /// The login asks for other readers; a renewal keeps the credential's.
        case readersGiven
    }

    /// Decides what a login by `caller` for `provider` does with `existing`.
    ///
    /// - Parameters:
    ///   - readersGiven: the login named readers (a renewal keeps the credential's own).
    ///   - replace: the login asked to replace the credential.
    /// - Throws: ``Refusal``; a caller who may not manage the credential gets
    ///   `.enrolment(.notPermitted)`, whatever else it asked.
    public static func decide(
        existing: Existing?, provider: String, readersGiven: Bool, replace: Bool, caller: CallerIdentity, access: AccessPolicy
    ) throws(Refusal) -> Placement {
        guard let existing else { return .new }
        let isAdmin = access.isAdmin(caller)
        // Checked first, so a caller who may not manage the credential learns nothing more.
        guard isAdmin || existing.ownerUID == caller.uid || access.mayManage(caller, readers: existing.readers) else {
            throw .enrolment(.notPermitted)
        }
        if replace {
            guard access.mayManage(caller, readers: existing.readers) else { throw .enrolment(.notPermitted) }
            return .replace
        }
        guard isAdmin || existing.ownerUID == caller.uid else { throw .notOwner }
        guard provider == existing.provider else { throw .otherProvider(existing.provider) }
        guard !readersGiven else { throw .readersGiven }
        return .renew
    }

    /// The credential a renewal stores: the login's tokens (and DPoP key), under the old
    /// credential's name, provider, readers and owner. Narrowed tokens of the old login and its
    /// re-login warnings go; the refresh bookkeeping is the login's.
    public static func renewed(_ old: Credential, with login: Credential) -> Credential {
        var renewed = login
        renewed.userIdentifier = old.userIdentifier
        renewed.provider = old.provider
        renewed.readers = old.readers
        renewed.enrolment = old.enrolment
        renewed.narrowedTokens = []
        renewed.generation = old.generation
        return renewed
    }

    /// What to revoke at the provider once the renewed credential is stored: the old grant, by
    /// ``RevocationRule`` (only what tokend obtained), unless the login handed back the same
    /// refresh token.
    public static func revocation(old: Credential, renewed: Credential) -> RevocationRule.Decision {
        let decision = RevocationRule.decide(old)
        switch decision {
        case .nothing:
            return .nothing
        case .refreshToken:
            guard let oldToken = old.refreshToken, let newToken = renewed.refreshToken else { return decision }
            return oldToken.value == newToken.value ? .nothing : .refreshToken
        case .accessToken:
            return old.accessToken.value == renewed.accessToken.value ? .nothing : .accessToken
        }
    }
}

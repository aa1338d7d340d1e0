/// What a removal revokes at the provider (RFC 7009): only tokens tokend itself received from
/// the provider for this credential.
///
/// A caller's `AddCredential` may carry any token it holds, including a copy of a credential it
/// only reads, or such a copy in the refresh-token field. Revoking that with tokend's own client
/// authentication would let a reader kill the grant behind someone else's credential (a provider
/// that does not find a token under the hinted type searches the others, and some revoke the
/// whole grant with its access token). So tokens are revoked only once the provider handed
/// tokens to tokend for this credential — a login, or a refresh grant, which also proves the
/// refresh token it spent is one of the provider's refresh tokens for tokend's client. That fact
/// is the credential's `lastRefreshAt`, which a login and every refresh grant set and
/// `AddCredential` never does (a replacement starts again without it). It is stored by both
/// stores already, so nothing new is kept.
public enum RevocationRule {
    public enum Decision: Sendable, Hashable {
        /// The refresh token: tokend got it (or had it accepted) from the provider.
        case refreshToken
        /// The access token of tokend's own grant, for a credential without a refresh token.
        case accessToken
        /// Nothing: the tokens came from a caller and were never answered by the provider.
        case nothing
    }

    public static func decide(_ credential: Credential) -> Decision {
        guard credential.status.lastRefreshAt != nil else { return .nothing }
        return credential.refreshToken == nil ? .accessToken : .refreshToken
    }
}

extension RevocationRule {
    /// What a removal revokes when an administrator asks for it anyway (`revokeAnyway`): what the
    /// rule revokes, else the refresh token, else the access token — whatever their origin. For
    /// a leaked credential that tokend never refreshed.
    public static func decide(_ credential: Credential, anyway: Bool) -> Decision {
        let decision = decide(credential)
        guard anyway, decision == .nothing else { return decision }
        return credential.refreshToken == nil ? .accessToken : .refreshToken
    }
}

/// Whether a credential handed to tokend can be used with the DPoP key it would get, decided
/// before anything is stored (RFC 9449).
///
/// - A login binds its tokens to tokend's key (its grants carry proofs), so a login's tokens
///   are kept when they are bound to that key or their binding cannot be read (opaque).
/// - `AddCredential` to a `dpop = true` provider gives the credential a new key that no token
///   is bound to yet. Its first refresh, carrying a proof of that key, binds the tokens that
///   follow only where the provider binds a refresh token issued without a key (RFC 9449 §5, for
///   confidential clients): `dpop_bind_on_refresh = true`. Other providers refuse that refresh
///   (glewlwyd: `invalid_dpop_proof`), so the credential is refused here instead of failing later.
/// - A token bound to a key tokend does not hold (`cnf.jkt`) is refused everywhere: no proof
///   tokend can make is accepted with it.
///
/// Pure: the server reads the thumbprints and carries out the decision.
public enum DPoPEnrolment: Sendable, Hashable {
    /// Store the credential (with the key, when there is one).
    case accept
    /// Refuse it; the reason says what to do instead.
    case refuse(reason: String)

    /// Where the credential comes from.
    public enum Source: Sendable, Hashable {
        /// A login's token response, bound to the key its grant proved (if any).
        case login
        /// A program's `AddCredential`.
        case added
    }

    /// The refusal's reason for a token bound to a key tokend does not hold.
    public static let boundToAnotherKey =
        "the access token is bound to a DPoP key tokend does not hold (cnf.jkt); log in with tokenctl login, "
        + "so that the provider binds the tokens to tokend's key"
    /// The refusal's reason for an added credential of a provider that does not bind at refresh.
    public static let bearerForDPoPProvider =
        "the provider uses DPoP (dpop = true) and does not bind a credential's tokens to a new key at its refresh "
        + "(dpop_bind_on_refresh); log in with tokenctl login, so that the provider binds the tokens to tokend's key"

    /// Decides.
    /// - Parameters:
    ///   - source: a login or `AddCredential`.
    ///   - providerUsesDPoP: the provider's `dpop`.
    ///   - providerBindsOnRefresh: the provider's `dpop_bind_on_refresh`.
    ///   - boundThumbprint: the access token's `cnf.jkt`, when it is a JWT that has one.
    ///   - heldThumbprint: the thumbprint of the key the credential would get (a login's key);
    ///     `nil` for a credential without one or with a key not generated yet.
    public static func decide(
        source: Source, providerUsesDPoP: Bool, providerBindsOnRefresh: Bool, boundThumbprint: String?, heldThumbprint: String?
    ) -> DPoPEnrolment {
        if let boundThumbprint, boundThumbprint != heldThumbprint { return .refuse(reason: boundToAnotherKey) }
        switch source {
        case .login:
            return .accept
        case .added:
            guard providerUsesDPoP, !providerBindsOnRefresh else { return .accept }
            return .refuse(reason: bearerForDPoPProvider)
        }
    }
}

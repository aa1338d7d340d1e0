import TokendCore

/// What the daemon keeps in memory for one credential: everything but the tokens, and a way to
/// get the access token when it is first asked for (see ``DeferredAccessToken``).
///
/// The refresh token is never read at start-up: it is needed only for a grant, and the grant
/// path reads the credential from the store (``CredentialStore/load(userIdentifier:)``) anyway.
public struct IndexedCredential: Sendable {
    /// The credential's metadata. Its `accessToken` is empty and its `refreshToken` `nil`:
    /// use ``accessToken`` and ``hasRefreshToken``.
    public var metadata: Credential
    /// Whether the stored credential has a refresh token.
    public var hasRefreshToken: Bool
    /// The access token, or where to read it.
    public var accessToken: DeferredAccessToken

    /// An entry for a credential that is already decrypted.
    public init(decrypted credential: Credential) {
        var metadata = credential
        metadata.accessToken = SecretString("")
        metadata.refreshToken = nil
        self.metadata = metadata
        self.hasRefreshToken = credential.refreshToken != nil
        self.accessToken = .plain(credential.accessToken)
    }

    /// An entry from its parts.
    public init(metadata: Credential, hasRefreshToken: Bool, accessToken: DeferredAccessToken) {
        self.metadata = metadata
        self.hasRefreshToken = hasRefreshToken
        self.accessToken = accessToken
    }
}

import TokendCore

/// An access token kept sealed in memory until it is first needed: the blob and its row's salt
/// as the store holds them. A shared store's node reads every row at start-up; opening a token
/// costs a key derivation and an AES-GCM open, which nobody pays for a credential nobody asks
/// for, and the cached-token path opens each at most once (the daemon keeps the encoded reply).
///
/// The row it came from was authenticated (its tag covers the blob and the salt), and the
/// binding is checked again when it is opened.
public struct SealedAccessToken: Sendable {
    /// The salt followed by the blob, in one allocation.
    private let bytes: [UInt8]
    /// The keys the row was read with, shared by every token of one load.
    private let opener: SealedTokenOpener

    /// A token as read from a row: `blob`, sealed with the subkey of `salt`.
    public init(blob: some Collection<UInt8>, salt: some Collection<UInt8>, opener: SealedTokenOpener) {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(salt.count + blob.count)
        bytes.append(contentsOf: salt)
        bytes.append(contentsOf: blob)
        self.bytes = bytes
        self.opener = opener
    }

    /// Opens the token.
    ///
    /// - Throws: ``StorageError`` `.decryption` or `.unknownKey`, as ``CredentialCipher/open(_:salt:binding:)``.
    func open(userIdentifier: String, provider: String) throws -> SecretString {
        let saltCount = CredentialCipher.saltByteCount
        guard bytes.count > saltCount else {
            throw StorageError(code: .decryption, message: "the stored access token of '\(userIdentifier)' is truncated")
        }
        return try opener.cipher.open(
            bytes[saltCount...], salt: bytes[..<saltCount],
            binding: SealBinding(userIdentifier: userIdentifier, provider: provider, column: .accessToken))
    }

    /// Whether both hold the same sealed value.
    func isSame(as other: SealedAccessToken) -> Bool { bytes == other.bytes }
}

/// The keys that open the ``SealedAccessToken``s of one load: one object for all of them.
public final class SealedTokenOpener: Sendable {
    let cipher: CredentialCipher

    /// An opener with the keys of `cipher`.
    public init(_ cipher: CredentialCipher) { self.cipher = cipher }
}

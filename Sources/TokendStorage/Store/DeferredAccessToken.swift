import TokendCore

/// An access token as the daemon holds it in memory: plaintext, still in the store, or sealed in
/// memory, read and opened when first needed.
///
/// The daemon's start-up reads only metadata (``CredentialStore/loadIndex()``), so a million
/// credentials are ready in a second or two and cost no memory for tokens nobody asks for. The
/// first use of a ``stored(_:)`` token reads its row by primary key and opens it (about 20 µs,
/// from the page cache: start-up has just read every page); a ``sealed(_:)`` one, kept as the
/// shared store's rows were read (a local read of a remote database would block), is opened
/// in memory. The caller keeps what it needs (the daemon keeps the encoded reply), so nothing
/// here is cached and no lock is needed.
public enum DeferredAccessToken: Sendable {
    /// The token itself.
    case plain(SecretString)
    /// The token is in the store; ``open(userIdentifier:provider:)`` reads it.
    case stored(StoredTokenReader)
    /// The token as sealed in its row; ``open(userIdentifier:provider:)`` opens it.
    case sealed(SealedAccessToken)

    /// The token: at once when plain, else read from the store and opened.
    ///
    /// - Parameters:
    ///   - userIdentifier: The credential it belongs to.
    ///   - provider: Its provider (bound into the seal, so a moved ciphertext fails).
    /// - Throws: ``StorageError``: `.notFound` if the row is gone, `.decryption`/`.unknownKey` if
    ///   it cannot be opened, `.closed` after the store was closed.
    public func open(userIdentifier: String, provider: String) throws -> SecretString {
        switch self {
        case .plain(let secret): secret
        case .stored(let reader): try reader.read(userIdentifier: userIdentifier, provider: provider)
        case .sealed(let sealed): try sealed.open(userIdentifier: userIdentifier, provider: provider)
        }
    }

    /// Whether the token is already in memory.
    public var isPlain: Bool {
        if case .plain = self { return true }
        return false
    }

    /// Whether `self` and `other` are known to be the same token without reading either: both
    /// the same plaintext, both still in the same store (which holds one token per user), or
    /// the same sealed value.
    public func isKnownSame(as other: DeferredAccessToken) -> Bool {
        switch (self, other) {
        case (.plain(let a), .plain(let b)): a == b
        case (.stored(let a), .stored(let b)): a === b
        case (.sealed(let a), .sealed(let b)): a.isSame(as: b)
        default: false
        }
    }
}

/// Reads one access token from a store on demand; one is shared by every token of one load.
public final class StoredTokenReader: Sendable {
    private let readToken: @Sendable (_ userIdentifier: String, _ provider: String) throws -> SecretString

    /// A reader that calls `read`, which must be safe to call from any thread (and may block
    /// briefly on a local read).
    public init(_ read: @escaping @Sendable (_ userIdentifier: String, _ provider: String) throws -> SecretString) {
        readToken = read
    }

    func read(userIdentifier: String, provider: String) throws -> SecretString {
        try readToken(userIdentifier, provider)
    }
}

/// Which token column a sealed value belongs to.
public struct TokenColumn: Sendable, Hashable, CustomStringConvertible {
    /// The column name, bound into the seal's associated data.
    public let name: String
    private init(_ name: String) { self.name = name }

    /// The access token.
    public static var accessToken: TokenColumn { TokenColumn("access_token") }
    /// The refresh token.
    public static var refreshToken: TokenColumn { TokenColumn("refresh_token") }
    /// The private key of a DPoP-bound credential, sealed like its tokens.
    public static var dpopKey: TokenColumn { TokenColumn("dpop_key") }
    /// The credential's narrowed tokens (``NarrowedTokenCoding``), sealed like its tokens.
    public static var narrowedTokens: TokenColumn { TokenColumn("narrowed_tokens") }

    public var description: String { name }
}

/// What a sealed token is bound to: opening it with any other binding fails, so a ciphertext
/// copied to another credential, another provider, or the other token column is useless there.
public struct SealBinding: Sendable, Hashable {
    /// The credential's user identifier.
    public var userIdentifier: String
    /// The credential's provider name.
    public var provider: String
    /// The column the token is stored in.
    public var column: TokenColumn

    /// Creates a binding.
    public init(userIdentifier: String, provider: String, column: TokenColumn) {
        self.userIdentifier = userIdentifier
        self.provider = provider
        self.column = column
    }

    /// The binding in an unambiguous byte form: each field is its UTF-8 length as a 4-byte
    /// big-endian integer followed by its bytes, so ("ab", "c") and ("a", "bc") differ.
    var encoded: [UInt8] {
        var bytes: [UInt8] = []
        encode(into: &bytes)
        return bytes
    }

    /// Appends ``encoded`` to `bytes`, in place: four bindings are encoded per refresh grant.
    func encode(into bytes: inout [UInt8]) {
        bytes.reserveCapacity(bytes.count + 12 + userIdentifier.utf8.count + provider.utf8.count + column.name.utf8.count)
        for field in [userIdentifier, provider, column.name] {
            let count = UInt32(truncatingIfNeeded: field.utf8.count)
            bytes.append(UInt8(count >> 24))
            bytes.append(UInt8(count >> 16 & 0xff))
            bytes.append(UInt8(count >> 8 & 0xff))
            bytes.append(UInt8(count & 0xff))
            bytes.append(contentsOf: field.utf8)
        }
    }
}

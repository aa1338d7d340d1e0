import Crypto
import Foundation

/// A 256-bit master key and its id.
///
/// The id is the first 8 bytes of the key's SHA-256, in lowercase hex: it names the key in every
/// sealed token and in logs, and reveals nothing usable about the key. `description` shows only
/// the id.
public struct MasterKey: Sendable, Equatable, CustomStringConvertible, CustomDebugStringConvertible {
    /// The length of a master key in bytes.
    public static let byteCount = 32
    /// The length of a key id in bytes (it is shown as twice as many hex digits).
    public static let idByteCount = 8

    /// The key id: 16 lowercase hex digits.
    public let id: String
    /// The id as raw bytes, as written into sealed tokens.
    let idBytes: [UInt8]
    /// The key. `SymmetricKey` keeps its bytes in storage that is zeroed when freed.
    let symmetricKey: SymmetricKey
    /// The HMAC that tags shared store rows (``RowAuthentication``), keyed once: a node checks
    /// every row's tag when it starts, and deriving its key per row cost more than the check
    /// itself. Each tag starts from a copy (the hash state is copied on its first update).
    let rowAuthenticationMAC: HMAC<SHA256>

    /// Wraps raw key bytes.
    ///
    /// - Parameter bytes: Exactly ``byteCount`` bytes.
    /// - Throws: ``StorageError`` with code `.keyFile` if the length is wrong.
    public init(bytes: some Collection<UInt8>) throws {
        guard bytes.count == Self.byteCount else {
            throw StorageError(
                code: .keyFile,
                message: "a master key must be \(Self.byteCount) bytes, not \(bytes.count)"
            )
        }
        self.init(symmetricKey: SymmetricKey(data: Array(bytes)))
    }

    init(symmetricKey: SymmetricKey) {
        self.symmetricKey = symmetricKey
        let digest = symmetricKey.withUnsafeBytes { SHA256.hash(data: $0) }
        self.idBytes = Array(digest.prefix(Self.idByteCount))
        self.id = Self.hex(idBytes)
        self.rowAuthenticationMAC = HMAC<SHA256>(
            key: HKDF<SHA256>.deriveKey(inputKeyMaterial: symmetricKey, info: RowAuthentication.info, outputByteCount: 32))
    }

    /// A new key from the system's secure random generator.
    public static func generate() -> MasterKey {
        MasterKey(symmetricKey: SymmetricKey(size: .bits256))
    }

    /// The key in standard base64, as one line of a key file.
    var base64: String {
        symmetricKey.withUnsafeBytes { Data($0).base64EncodedString() }
    }

    public static func == (lhs: MasterKey, rhs: MasterKey) -> Bool { lhs.idBytes == rhs.idBytes }

    public var description: String { "MasterKey(\(id))" }
    public var debugDescription: String { description }

    static func hex(_ bytes: some Sequence<UInt8>) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var result: [UInt8] = []
        for byte in bytes {
            result.append(digits[Int(byte >> 4)])
            result.append(digits[Int(byte & 0x0f)])
        }
        return String(decoding: result, as: UTF8.self)
    }
}

import CTokendShims
import Crypto
import TokendCore

/// Seals and opens credential tokens with AES-256-GCM under per-credential subkeys.
///
/// Each credential row carries a random 32-byte salt; the subkey for that row is
/// HKDF-SHA256(master key, salt, info "tokend credential v1"). A fresh salt is drawn whenever a
/// row's tokens are written, so each subkey seals only a handful of values and random 96-bit
/// nonces stay far inside GCM's limits however many credentials and refreshes there are.
///
/// A sealed blob is
///
/// ```
/// version (1 byte, = 1) | master key id (8) | nonce (12) | ciphertext | tag (16)
/// ```
///
/// and its associated data is the 9-byte header followed by the ``SealBinding`` in
/// length-prefixed form, so version, key id, user, provider and column are all authenticated.
///
/// A row's subkey is derived once for both of its tokens (``RowCipher``) and kept no longer:
/// HKDF is cheap (a few HMAC-SHA256 computations), yet a refresh storm derives four per grant,
/// and a longer-lived cache would keep extra key material in memory for little gain.
public struct CredentialCipher: Sendable {
    /// The blob format version this build writes and reads.
    public static let version: UInt8 = 1
    /// The length of a row's salt.
    public static let saltByteCount = 32
    static let nonceByteCount = 12
    static let tagByteCount = 16
    static let headerByteCount = 1 + MasterKey.idByteCount
    static let minimumBlobByteCount = headerByteCount + nonceByteCount + tagByteCount
    static let info = Array("tokend credential v1".utf8)

    /// The keys: the current one seals, any of them opens.
    public var keyring: Keyring

    /// Creates a cipher over `keyring`.
    public init(keyring: Keyring) { self.keyring = keyring }

    /// A new random salt for a row, from the kernel's CSPRNG in one `getrandom` call (drawing it
    /// a byte at a time through `SystemRandomNumberGenerator` cost 32 system calls per write).
    public static func makeSalt() -> [UInt8] {
        [UInt8](unsafeUninitializedCapacity: saltByteCount) { buffer, count in
            if tokend_random_bytes(buffer.baseAddress, UInt(saltByteCount)) != 0 {
                // Only without getrandom(2) (kernels before 3.17): the standard library's
                // generator, which reads /dev/urandom there.
                var generator = SystemRandomNumberGenerator()
                for index in 0..<saltByteCount { buffer[index] = UInt8.random(in: .min ... .max, using: &generator) }
            }
            count = saltByteCount
        }
    }

    /// The id of the master key a blob was sealed with, or `nil` if it is too short to have one.
    public static func keyID(of blob: some Collection<UInt8>) -> String? {
        guard blob.count >= headerByteCount else { return nil }
        return MasterKey.hex(blob.dropFirst().prefix(MasterKey.idByteCount))
    }

    /// Seals a token under the current key.
    ///
    /// - Parameters:
    ///   - secret: The token.
    ///   - salt: The row's salt (``saltByteCount`` bytes).
    ///   - binding: The row and column the blob will be stored in.
    /// - Returns: The sealed blob.
    /// - Throws: ``StorageError`` with code `.decryption` if the salt has the wrong length or
    ///   sealing fails.
    public func seal(_ secret: SecretString, salt: some Collection<UInt8>, binding: SealBinding) throws -> [UInt8] {
        try RowCipher(self, salt: salt).seal(secret, binding: binding)
    }

    /// Opens a blob made by ``seal(_:salt:binding:)``.
    ///
    /// - Parameters:
    ///   - blob: The sealed blob.
    ///   - salt: The row's salt.
    ///   - binding: The row and column the blob was read from.
    /// - Returns: The token.
    /// - Throws: ``StorageError`` with code `.unknownKey` if the blob names a key the keyring
    ///   lacks, or `.decryption` if it is malformed, altered, or was sealed for another binding.
    public func open(_ blob: some Collection<UInt8>, salt: some Collection<UInt8>, binding: SealBinding) throws
        -> SecretString
    {
        try RowCipher(self, salt: salt).open(blob, binding: binding)
    }
}

/// Seals and opens the tokens of one row: the row's subkey under a master key is derived on
/// first use and reused for the row's other token. Lives for one row's read or write.
final class RowCipher {
    private let cipher: CredentialCipher
    private let salt: [UInt8]
    private var derived: (keyID: [UInt8], key: SymmetricKey)?

    init(_ cipher: CredentialCipher, salt: some Collection<UInt8>) {
        self.cipher = cipher
        self.salt = Array(salt)
    }

    /// See ``CredentialCipher/seal(_:salt:binding:)``.
    func seal(_ secret: SecretString, binding: SealBinding) throws -> [UInt8] {
        let key = cipher.keyring.current
        var blob: [UInt8] = []
        blob.reserveCapacity(CredentialCipher.minimumBlobByteCount + secret.value.utf8.count)
        blob.append(CredentialCipher.version)
        blob.append(contentsOf: key.idBytes)
        do {
            let box = try AES.GCM.seal(
                Array(secret.value.utf8),
                using: try subkey(key),
                nonce: AES.GCM.Nonce(),
                authenticating: Self.associatedData(header: blob, binding: binding)
            )
            // nonce ‖ ciphertext ‖ tag: what `combined` holds for a 12-byte nonce.
            guard let combined = box.combined else {
                throw StorageError(
                    code: .decryption,
                    message: "cannot seal the \(binding.column) of credential '\(binding.userIdentifier)': no combined form")
            }
            blob.append(contentsOf: combined)
            return blob
        } catch let error as StorageError {
            throw error
        } catch {
            throw StorageError(
                code: .decryption,
                message: "cannot seal the \(binding.column) of credential '\(binding.userIdentifier)'",
                underlying: error
            )
        }
    }

    /// See ``CredentialCipher/open(_:salt:binding:)``.
    func open(_ blob: some Collection<UInt8>, binding: SealBinding) throws -> SecretString {
        let blob = Array(blob)
        let what = "the \(binding.column) of credential '\(binding.userIdentifier)'"
        guard blob.count >= CredentialCipher.minimumBlobByteCount else {
            throw StorageError(code: .decryption, message: "cannot decrypt \(what): sealed value is truncated")
        }
        guard blob[0] == CredentialCipher.version else {
            throw StorageError(
                code: .decryption,
                message: "cannot decrypt \(what): unknown format version \(blob[0]) (this build reads \(CredentialCipher.version))"
            )
        }
        let idBytes = blob[1..<CredentialCipher.headerByteCount]
        guard let key = cipher.keyring.key(idBytes: idBytes) else {
            throw StorageError(
                code: .unknownKey,
                message: "cannot decrypt \(what): it is sealed with master key \(MasterKey.hex(idBytes)), which is "
                    + "not in the keyring (\(cipher.keyring.keyIDs.joined(separator: ", "))); add that key as a later "
                    + "line of the key file"
            )
        }
        let nonceEnd = CredentialCipher.headerByteCount + CredentialCipher.nonceByteCount
        let tagStart = blob.count - CredentialCipher.tagByteCount
        let plaintext: [UInt8]
        do {
            let box = try AES.GCM.SealedBox(
                nonce: AES.GCM.Nonce(data: blob[CredentialCipher.headerByteCount..<nonceEnd]),
                ciphertext: blob[nonceEnd..<tagStart],
                tag: blob[tagStart...]
            )
            plaintext = Array(
                try AES.GCM.open(
                    box,
                    using: try subkey(key),
                    authenticating: Self.associatedData(header: blob[..<CredentialCipher.headerByteCount], binding: binding)
                )
            )
        } catch let error as StorageError {
            throw error
        } catch {
            // CryptoKit's errors carry no data, only a kind; still, keep the message self-contained.
            throw StorageError(
                code: .decryption,
                message: "cannot decrypt \(what): authentication failed (the value was altered, moved from "
                    + "another credential or column, or the key is wrong)",
                underlying: error
            )
        }
        guard let text = String(validating: plaintext, as: UTF8.self) else {
            throw StorageError(code: .decryption, message: "cannot decrypt \(what): the plaintext is not UTF-8")
        }
        return SecretString(text)
    }

    /// The associated data of a blob: its header, then the binding (see ``CredentialCipher``).
    private static func associatedData(header: some Collection<UInt8>, binding: SealBinding) -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(header.count + 64)
        bytes.append(contentsOf: header)
        binding.encode(into: &bytes)
        return bytes
    }

    /// HKDF-SHA256(master key, salt, info) → a 256-bit AES key for one row.
    private func subkey(_ key: MasterKey) throws -> SymmetricKey {
        if let derived, derived.keyID == key.idBytes { return derived.key }
        guard salt.count == CredentialCipher.saltByteCount else {
            throw StorageError(
                code: .decryption,
                message: "a credential salt must be \(CredentialCipher.saltByteCount) bytes, not \(salt.count)"
            )
        }
        let subkey = HKDF<SHA256>.deriveKey(
            inputKeyMaterial: key.symmetricKey,
            salt: salt,
            info: CredentialCipher.info,
            outputByteCount: 32
        )
        derived = (key.idBytes, subkey)
        return subkey
    }
}

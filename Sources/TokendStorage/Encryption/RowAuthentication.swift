import Crypto

/// One stored column's value as it is authenticated: exactly the bytes the database holds.
public enum AuthenticatedValue: Sendable, Hashable {
    case text(String?)
    case integer(Int64?)
    case bytes([UInt8]?)
}

/// Authenticates the columns of a stored credential that decide who may read it and what is
/// served (readers, enrolment, provider, token type, scope, times, state and the sealed tokens),
/// and its generation, with the master key, so that a row edited or rolled back outside tokend
/// is refused.
///
/// A row's tag is
///
/// ```
/// version (1 byte, = 1) | master key id (8) | HMAC-SHA256 (32)
/// ```
///
/// under HKDF-SHA256(master key, info "tokend row authentication v1"), over the version, the
/// key id, the user identifier, the SHA-256 of the content columns (``contentDigest(_:)``:
/// everything but the refresh bookkeeping), the refresh bookkeeping and the generation. Every
/// field is length-prefixed and named, so no two rows encode alike. The content is digested on
/// its own so that a status-only write can authenticate the new status without the tokens.
///
/// Pure: the stores compute tags on every write and check them on every read.
public enum RowAuthentication {
    /// The tag format version this build writes and reads.
    public static let version: UInt8 = 1
    /// A tag's length.
    public static let tagByteCount = 1 + MasterKey.idByteCount + 32
    static let info = Array("tokend row authentication v1".utf8)

    /// The SHA-256 of the named content columns, in the order given (the stores pass them in a
    /// fixed order).
    public static func contentDigest(_ columns: [(String, AuthenticatedValue)]) -> [UInt8] {
        var bytes: [UInt8] = []
        for (name, value) in columns { append(name, value, to: &bytes) }
        return Array(SHA256.hash(data: bytes))
    }

    /// The tag of a row under the keyring's current key.
    public static func tag(
        userIdentifier: String, contentDigest: [UInt8], status: [(String, AuthenticatedValue)], generation: Int64, keyring: Keyring
    ) -> [UInt8] {
        let key = keyring.current
        let header = [version] + key.idBytes
        return header + mac(header: header, key: key, userIdentifier, contentDigest, status, generation)
    }

    /// Checks a row's tag.
    ///
    /// - Throws: ``StorageError`` `.integrity` if the tag is missing, malformed, or does not
    ///   match the row; `.unknownKey` if it names a key the keyring lacks.
    public static func verify(
        _ tag: [UInt8]?, userIdentifier: String, contentDigest: [UInt8], status: [(String, AuthenticatedValue)], generation: Int64,
        keyring: Keyring
    ) throws(StorageError) {
        let what = "stored credential '\(userIdentifier)'"
        guard let tag else {
            throw StorageError(code: .integrity, message: "\(what) has no authentication tag; it was not written by tokend")
        }
        guard tag.count == tagByteCount, tag[0] == version else {
            throw StorageError(code: .integrity, message: "\(what) has a malformed authentication tag")
        }
        let header = Array(tag[..<(1 + MasterKey.idByteCount)])
        guard let key = keyring.key(idBytes: header.dropFirst()) else {
            // As for a sealed token under a key the keyring lacks: most likely a node given the
            // wrong key file, so the error says what to do. The row is refused all the same.
            throw StorageError(
                code: .unknownKey,
                message: "\(what) is authenticated with master key \(MasterKey.hex(header.dropFirst())), which is not in the "
                    + "keyring (\(keyring.keyIDs.joined(separator: ", "))); add that key as a later line of the key file")
        }
        let expected = mac(header: header, key: key, userIdentifier, contentDigest, status, generation)
        // Constant time: the comparison must not tell an attacker how much of a forged tag was right.
        var difference: UInt8 = 0
        for (left, right) in zip(expected, tag[header.count...]) { difference |= left ^ right }
        guard difference == 0 else {
            throw StorageError(
                code: .integrity,
                message: "\(what) fails its integrity check: it was changed outside tokend (readers, owner, state, "
                    + "tokens or generation edited, or copied from another row); it is refused")
        }
    }

    /// The key id of a tag, or nil if it is too short to have one.
    public static func keyID(of tag: [UInt8]) -> String? {
        guard tag.count >= 1 + MasterKey.idByteCount else { return nil }
        return MasterKey.hex(tag[1..<(1 + MasterKey.idByteCount)])
    }

    private static func mac(
        header: [UInt8], key: MasterKey, _ userIdentifier: String, _ contentDigest: [UInt8], _ status: [(String, AuthenticatedValue)],
        _ generation: Int64
    ) -> [UInt8] {
        let macKey = HKDF<SHA256>.deriveKey(inputKeyMaterial: key.symmetricKey, info: info, outputByteCount: 32)
        var bytes = header
        append("user_identifier", .text(userIdentifier), to: &bytes)
        append("content", .bytes(contentDigest), to: &bytes)
        for (name, value) in status { append(name, value, to: &bytes) }
        append("generation", .integer(generation), to: &bytes)
        return Array(HMAC<SHA256>.authenticationCode(for: bytes, using: macKey))
    }

    /// `name`, then a kind byte (0 null, 1 text, 2 integer, 3 bytes), then the value
    /// length-prefixed (4-byte big-endian length).
    private static func append(_ name: String, _ value: AuthenticatedValue, to bytes: inout [UInt8]) {
        func field(_ data: some Collection<UInt8>) {
            let count = UInt32(truncatingIfNeeded: data.count)
            bytes += [UInt8(count >> 24), UInt8(count >> 16 & 0xff), UInt8(count >> 8 & 0xff), UInt8(count & 0xff)]
            bytes += data
        }
        field(Array(name.utf8))
        switch value {
        case .text(nil), .integer(nil), .bytes(nil):
            bytes.append(0)
        case .text(let text?):
            bytes.append(1)
            field(Array(text.utf8))
        case .integer(let number?):
            bytes.append(2)
            field((0..<8).reversed().map { UInt8(truncatingIfNeeded: number >> ($0 * 8)) })
        case .bytes(let data?):
            bytes.append(3)
            field(data)
        }
    }
}

/// The frame of tokend's authentication tags (a shared store row's, a node's record of the
/// store): `version (1 byte) | master key id (8) | HMAC-SHA256 (32)`.
enum KeyedTag {
    static let headerByteCount = 1 + MasterKey.idByteCount
    static let byteCount = headerByteCount + 32

    /// The header of a tag of `version` made with `key`.
    static func header(version: UInt8, key: MasterKey) -> [UInt8] { [version] + key.idBytes }

    /// The key a tag of the right length names.
    ///
    /// - Throws: ``StorageError`` `.unknownKey` if the keyring lacks it, saying what to do: most
    ///   likely a node given the wrong key file.
    static func key(of tag: [UInt8], keyring: Keyring, what: String) throws(StorageError) -> MasterKey {
        let id = tag[1..<headerByteCount]
        guard let key = keyring.key(idBytes: id) else {
            throw StorageError(
                code: .unknownKey,
                message: "\(what) is authenticated with master key \(MasterKey.hex(id)), which is not in the keyring "
                    + "(\(keyring.keyIDs.joined(separator: ", "))); add that key as a later line of the key file")
        }
        return key
    }

    /// Whether `tag`'s HMAC is `expected`, in constant time: the comparison must not tell an
    /// attacker how much of a forged tag was right.
    static func matches(_ expected: [UInt8], _ tag: [UInt8]) -> Bool {
        guard tag.count == byteCount, expected.count == byteCount - headerByteCount else { return false }
        var difference: UInt8 = 0
        for (left, right) in zip(expected, tag[headerByteCount...]) { difference |= left ^ right }
        return difference == 0
    }
}

import Crypto

/// What a node records about the shared store it serves, outside the database: the store's id
/// and the newest schema version it has seen there. Authenticated with the master key, so that
/// the record is this deployment's own.
///
/// A node that has a record refuses a store with another id, without an id, or at a lower
/// schema version (what an attacker who strips the row tags, or replaces the store's id, leaves
/// behind) until an administrator confirms the store (`tokenctl store adopt`).
///
/// The tag is `version (1) | master key id (8) | HMAC-SHA256 (32)` under
/// HKDF-SHA256(master key, info "tokend shared store record v1"), over the version, the key id,
/// the store's id and the schema version, each named and length-prefixed as in
/// ``RowAuthentication``.
public struct SharedStoreRecord: Sendable, Hashable, CustomStringConvertible {
    /// `tokend_meta.store_id` of the store.
    public var storeID: String
    /// The newest schema version the node has seen the store at.
    public var schemaVersion: Int

    public init(storeID: String, schemaVersion: Int) {
        self.storeID = storeID
        self.schemaVersion = schemaVersion
    }

    static let version: UInt8 = 1
    static let info = Array("tokend shared store record v1".utf8)

    /// The record's tag under the keyring's current key.
    public func tag(keyring: Keyring) -> [UInt8] {
        let header = KeyedTag.header(version: Self.version, key: keyring.current)
        return header + mac(header: header, key: keyring.current)
    }

    /// The record, if `tag` authenticates it under a key of `keyring`.
    ///
    /// - Throws: ``StorageError`` `.integrity` if the tag is malformed or does not match,
    ///   `.unknownKey` if it names a key the keyring lacks.
    public static func verified(storeID: String, schemaVersion: Int, tag: [UInt8], keyring: Keyring) throws(StorageError)
        -> SharedStoreRecord
    {
        let record = SharedStoreRecord(storeID: storeID, schemaVersion: schemaVersion)
        guard tag.count == KeyedTag.byteCount, tag[0] == version else {
            throw StorageError(code: .integrity, message: "the record of the shared store has a malformed authentication tag")
        }
        let key = try KeyedTag.key(of: tag, keyring: keyring, what: "the record of the shared store")
        guard KeyedTag.matches(record.mac(header: Array(tag[..<KeyedTag.headerByteCount]), key: key), tag) else {
            throw StorageError(code: .integrity, message: "the record of the shared store fails its integrity check")
        }
        return record
    }

    private func mac(header: [UInt8], key: MasterKey) -> [UInt8] {
        let macKey = HKDF<SHA256>.deriveKey(inputKeyMaterial: key.symmetricKey, info: Self.info, outputByteCount: 32)
        var bytes = header
        RowAuthentication.append("store", .text(storeID), to: &bytes)
        RowAuthentication.append("schema_version", .integer(Int64(schemaVersion)), to: &bytes)
        return Array(HMAC<SHA256>.authenticationCode(for: bytes, using: macKey))
    }

    public var description: String { "store \(storeID) at schema version \(schemaVersion)" }
}

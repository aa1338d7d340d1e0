import Crypto

/// One stored column's value as it is authenticated: exactly the bytes the database holds.
public enum AuthenticatedValue: Sendable, Hashable {
    case text(String?)
    case integer(Int64?)
    case bytes([UInt8]?)
}

/// Authenticates the columns of a stored credential that decide who may read it and what is
/// served (readers, enrolment, provider, token type, scope, times, state and the sealed tokens),
/// its generation and the store it belongs to, with the master key, so that a row edited,
/// rolled back or moved from another store outside tokend is refused.
///
/// A row's tag is
///
/// ```
/// version (1 byte, = 2) | master key id (8) | HMAC-SHA256 (32)
/// ```
///
/// under HKDF-SHA256(master key, info "tokend row authentication v1") (derived once per key,
/// ``MasterKey/rowAuthenticationMAC``), over the version, the
/// key id, the store's id (`tokend_meta.store_id`), the user identifier, the SHA-256 of the
/// content columns (``contentDigest(_:)``: everything but the refresh bookkeeping), the refresh
/// bookkeeping and the generation. Every field is length-prefixed and named, so no two rows
/// encode alike. The content is digested on its own so that a status-only write can
/// authenticate the new status without the tokens.
///
/// Tags of version 1 (``legacyVersion``) do not name the store: two stores whose nodes share a
/// master key would accept each other's rows. They are never accepted as they are; a node
/// carrying its own store over from version 1 checks them with
/// ``verifyLegacy(_:userIdentifier:contentDigest:status:generation:keyring:)`` and tags them
/// anew.
///
/// Pure: the stores compute tags on every write and check them on every read.
public enum RowAuthentication {
    /// The tag format version this build writes and accepts.
    public static let version: UInt8 = 2
    /// The format of tags that do not name their store.
    public static let legacyVersion: UInt8 = 1
    /// A tag's length (both versions).
    public static let tagByteCount = KeyedTag.byteCount
    static let info = Array("tokend row authentication v1".utf8)

    /// The SHA-256 of the named content columns, in the order given (the stores pass them in a
    /// fixed order).
    public static func contentDigest(_ columns: [(String, AuthenticatedValue)]) -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(512)
        for (name, value) in columns { append(name, value, to: &bytes) }
        return digest(ofEncoded: bytes)
    }

    /// The tag of a row of the store `store`, under the keyring's current key.
    public static func tag(
        store: String, userIdentifier: String, contentDigest: [UInt8], status: [(String, AuthenticatedValue)], generation: Int64,
        keyring: Keyring
    ) -> [UInt8] {
        let key = keyring.current
        let header = KeyedTag.header(version: version, key: key)
        return header + mac(header: header, key: key, store: store, userIdentifier, contentDigest, status, generation)
    }

    /// A tag of the earlier format, which does not name the store: only what a node of an
    /// earlier version wrote (tests of carrying such rows over).
    static func legacyTag(
        userIdentifier: String, contentDigest: [UInt8], status: [(String, AuthenticatedValue)], generation: Int64, keyring: Keyring
    ) -> [UInt8] {
        let key = keyring.current
        let header = KeyedTag.header(version: legacyVersion, key: key)
        return header + mac(header: header, key: key, store: nil, userIdentifier, contentDigest, status, generation)
    }

    /// Checks a row's tag for the store `store`.
    ///
    /// - Throws: ``StorageError`` `.integrity` if the tag is missing, malformed, of the earlier
    ///   format, or does not match the row and the store; `.unknownKey` if it names a key the
    ///   keyring lacks.
    public static func verify(
        _ tag: [UInt8]?, store: String, userIdentifier: String, contentDigest: [UInt8], status: [(String, AuthenticatedValue)],
        generation: Int64, keyring: Keyring
    ) throws(StorageError) {
        let what = "stored credential '\(userIdentifier)'"
        let (tag, key) = try parse(tag, keyring: keyring, what: what)
        guard tag[0] == version else {
            throw StorageError(
                code: .integrity,
                message: "\(what) carries an authentication tag of an earlier format, which does not name its store; it is refused "
                    + "until an administrator adopts the store's rows (tokenctl store adopt)")
        }
        let header = Array(tag[..<headerByteCount])
        try compare(
            mac(header: header, key: key, store: store, userIdentifier, contentDigest, status, generation), tag, what: what,
            problem: "it was changed outside tokend (readers, owner, state, tokens or generation edited, or copied from another "
                + "row or another store); it is refused")
    }

    /// Checks a tag of the earlier format (``legacyVersion``), which names no store: only to
    /// carry rows over to the current format.
    ///
    /// - Throws: as ``verify(_:store:userIdentifier:contentDigest:status:generation:keyring:)``,
    ///   and `.integrity` for a tag of any other format.
    public static func verifyLegacy(
        _ tag: [UInt8]?, userIdentifier: String, contentDigest: [UInt8], status: [(String, AuthenticatedValue)], generation: Int64,
        keyring: Keyring
    ) throws(StorageError) {
        let what = "stored credential '\(userIdentifier)'"
        let (tag, key) = try parse(tag, keyring: keyring, what: what)
        guard tag[0] == legacyVersion else {
            throw StorageError(code: .integrity, message: "\(what) has no authentication tag of the earlier format")
        }
        let header = Array(tag[..<headerByteCount])
        try compare(
            mac(header: header, key: key, store: nil, userIdentifier, contentDigest, status, generation), tag, what: what,
            problem: "its authentication tag of the earlier format does not match it; it was changed outside tokend")
    }

    /// The format version of a tag (``version`` or ``legacyVersion``), or nil if there is none.
    public static func formatVersion(of tag: [UInt8]?) -> UInt8? { tag?.first }

    /// The key id of a tag, or nil if it is too short to have one.
    public static func keyID(of tag: [UInt8]) -> String? {
        guard tag.count >= headerByteCount else { return nil }
        return MasterKey.hex(tag[1..<headerByteCount])
    }

    private static let headerByteCount = KeyedTag.headerByteCount

    /// The tag and the key it names, or why it cannot be checked.
    private static func parse(_ tag: [UInt8]?, keyring: Keyring, what: String) throws(StorageError) -> ([UInt8], MasterKey) {
        guard let tag else {
            throw StorageError(code: .integrity, message: "\(what) has no authentication tag; it was not written by tokend")
        }
        guard tag.count == tagByteCount, tag[0] == version || tag[0] == legacyVersion else {
            throw StorageError(code: .integrity, message: "\(what) has a malformed authentication tag")
        }
        return (tag, try KeyedTag.key(of: tag, keyring: keyring, what: what))
    }

    private static func compare(_ expected: [UInt8], _ tag: [UInt8], what: String, problem: String) throws(StorageError) {
        guard KeyedTag.matches(expected, tag) else {
            throw StorageError(code: .integrity, message: "\(what) fails its integrity check: \(problem)")
        }
    }

    /// `store` is nil for the earlier format, which did not authenticate it.
    private static func mac(
        header: [UInt8], key: MasterKey, store: String?, _ userIdentifier: String, _ contentDigest: [UInt8],
        _ status: [(String, AuthenticatedValue)], _ generation: Int64
    ) -> [UInt8] {
        var bytes = header
        bytes.reserveCapacity(256)
        if let store { append("store", .text(store), to: &bytes) }
        append("user_identifier", .text(userIdentifier), to: &bytes)
        append("content", .bytes(contentDigest), to: &bytes)
        for (name, value) in status { append(name, value, to: &bytes) }
        append("generation", .integer(generation), to: &bytes)
        var mac = key.rowAuthenticationMAC
        mac.update(data: bytes)
        return Array(mac.finalize())
    }

    /// Appends one field as tags encode it: `name`, then a kind byte (0 null, 1 text, 2 integer,
    /// 3 bytes), then the value length-prefixed (4-byte big-endian length). A store that digests
    /// a row's content itself (``digest(ofEncoded:)``) appends its columns with this.
    public static func append(_ name: String, _ value: AuthenticatedValue, to bytes: inout [UInt8]) {
        switch value {
        case .text(nil), .integer(nil), .bytes(nil):
            appendField(name.utf8, to: &bytes)
            bytes.append(0)
        case .text(let text?):
            appendField(name.utf8, to: &bytes)
            bytes.append(1)
            appendField(text.utf8, to: &bytes)
        case .integer(let number?):
            appendField(name.utf8, to: &bytes)
            bytes.append(2)
            appendLength(8, to: &bytes)
            for shift in stride(from: 56, through: 0, by: -8) { bytes.append(UInt8(truncatingIfNeeded: number >> shift)) }
        case .bytes(let data?):
            appendBytes(name, data, to: &bytes)
        }
    }

    /// ``append(_:_:to:)`` for a byte column as stored, without copying it into an array first.
    public static func appendBytes(_ name: String, _ data: (some Collection<UInt8>)?, to bytes: inout [UInt8]) {
        appendField(name.utf8, to: &bytes)
        guard let data else {
            bytes.append(0)
            return
        }
        bytes.append(3)
        appendField(data, to: &bytes)
    }

    /// The content digest of columns already encoded with ``append(_:_:to:)``, in the order
    /// ``contentDigest(_:)`` takes them: the same digest.
    public static func digest(ofEncoded bytes: [UInt8]) -> [UInt8] { Array(SHA256.hash(data: bytes)) }

    private static func appendField(_ data: some Collection<UInt8>, to bytes: inout [UInt8]) {
        appendLength(data.count, to: &bytes)
        bytes.append(contentsOf: data)
    }

    private static func appendLength(_ length: Int, to bytes: inout [UInt8]) {
        let count = UInt32(truncatingIfNeeded: length)
        bytes.append(UInt8(count >> 24))
        bytes.append(UInt8(count >> 16 & 0xff))
        bytes.append(UInt8(count >> 8 & 0xff))
        bytes.append(UInt8(count & 0xff))
    }
}

import Testing

@testable import TokendStorage

/// ``RowAuthentication``: a tag verifies only for exactly the row, and the store, it was made for.
struct RowAuthenticationTests {
    static let keyring = Keyring(current: MasterKey.generate())
    static let content: [(String, AuthenticatedValue)] = [
        ("provider", .text("example")), ("readers", .text(#"["uid:1000"]"#)), ("enrolled_uid", .integer(1000)),
        ("access_token", .bytes([1, 2, 3])), ("scope", .text(nil)),
    ]
    static let status: [(String, AuthenticatedValue)] = [("state", .text("valid")), ("retry_at", .integer(nil))]

    static func tag(keyring: Keyring = keyring, store: String = "store-1") -> [UInt8] {
        RowAuthentication.tag(
            store: store, userIdentifier: "alice", contentDigest: RowAuthentication.contentDigest(content), status: status, generation: 7,
            keyring: keyring)
    }

    static func legacyTag() -> [UInt8] {
        RowAuthentication.legacyTag(
            userIdentifier: "alice", contentDigest: RowAuthentication.contentDigest(content), status: status, generation: 7,
            keyring: keyring)
    }

    static func verify(
        _ tag: [UInt8]?, store: String = "store-1", user: String = "alice", content: [(String, AuthenticatedValue)] = content,
        status: [(String, AuthenticatedValue)] = status, generation: Int64 = 7, keyring: Keyring = keyring
    ) -> StorageError? {
        do {
            try RowAuthentication.verify(
                tag, store: store, userIdentifier: user, contentDigest: RowAuthentication.contentDigest(content), status: status,
                generation: generation, keyring: keyring)
            return nil
        } catch {
            return error
        }
    }

    @Test func aTagVerifiesForItsRow() {
        #expect(Self.verify(Self.tag()) == nil)
        #expect(Self.tag().count == RowAuthentication.tagByteCount)
        #expect(RowAuthentication.keyID(of: Self.tag()) == Self.keyring.current.id)
        #expect(RowAuthentication.formatVersion(of: Self.tag()) == RowAuthentication.version)
    }

    /// Each change an attacker could make to the row, and the tag's absence or damage.
    @Test(arguments: [
        "user", "readers", "owner", "token", "null scope set", "state", "status cleared", "generation", "no tag", "truncated",
        "flipped bit", "another store", "earlier format", "unknown key",
    ])
    func anyChangeFailsWithIntegrity(_ change: String) {
        var content = Self.content
        var status = Self.status
        var user = "alice"
        var generation: Int64 = 7
        var tag: [UInt8]? = Self.tag()
        var keyring = Self.keyring
        var store = "store-1"
        switch change {
        case "user": user = "bob"
        case "readers": content[1].1 = .text(#"["uid:1000","uid:7001"]"#)
        case "owner": content[2].1 = .integer(7001)
        case "token": content[3].1 = .bytes([1, 2, 4])
        case "null scope set": content[4].1 = .text("")
        case "state": status[0].1 = .text("reauthentication_required")
        case "status cleared": status[1].1 = .integer(0)
        case "generation": generation = 8
        case "no tag": tag = nil
        case "truncated": tag = Array(Self.tag().dropLast())
        case "flipped bit": tag![20] ^= 1
        case "another store": store = "store-2"
        case "earlier format": tag = Self.legacyTag()
        case "unknown key": keyring = Keyring(current: MasterKey.generate())
        default: Issue.record("unknown change \(change)")
        }
        let error = Self.verify(tag, store: store, user: user, content: content, status: status, generation: generation, keyring: keyring)
        #expect(error?.code == (change == "unknown key" ? .unknownKey : .integrity), "\(change)")
    }

    /// A tag of the earlier format is checked only as such, to carry its row over; a current
    /// tag is not one.
    @Test func aTagOfTheEarlierFormatChecksOutOnlyAsSuch() throws {
        let digest = RowAuthentication.contentDigest(Self.content)
        try RowAuthentication.verifyLegacy(
            Self.legacyTag(), userIdentifier: "alice", contentDigest: digest, status: Self.status, generation: 7, keyring: Self.keyring)
        #expect(throws: StorageError.self) {
            try RowAuthentication.verifyLegacy(
                Self.legacyTag(), userIdentifier: "alice", contentDigest: digest, status: Self.status, generation: 8, keyring: Self.keyring)
        }
        #expect(throws: StorageError.self) {
            try RowAuthentication.verifyLegacy(
                Self.tag(), userIdentifier: "alice", contentDigest: digest, status: Self.status, generation: 7, keyring: Self.keyring)
        }
        #expect(Self.verify(Self.legacyTag())?.message.contains("earlier format") == true)
    }

    @Test func aTagUnderAnOlderKeyStillVerifies() {
        let old = MasterKey.generate()
        let tag = Self.tag(keyring: Keyring(current: old))
        #expect(Self.verify(tag, keyring: Keyring(current: MasterKey.generate(), older: [old])) == nil)
    }

    /// Fields are named, length-prefixed and typed: no two rows encode alike. (A null is a null
    /// whatever the type: each column name has one type.)
    @Test func digestsAreUnambiguous() {
        let pairs: [([(String, AuthenticatedValue)], [(String, AuthenticatedValue)])] = [
            ([("a", .text("bc"))], [("ab", .text("c"))]),
            ([("a", .text(nil))], [("a", .text(""))]),
            ([("a", .integer(nil))], [("a", .integer(0))]),
            ([("a", .text("1"))], [("a", .bytes([0x31]))]),
            ([("a", .text("x")), ("b", .text("y"))], [("b", .text("y")), ("a", .text("x"))]),
        ]
        for (left, right) in pairs { #expect(RowAuthentication.contentDigest(left) != RowAuthentication.contentDigest(right)) }
    }
}

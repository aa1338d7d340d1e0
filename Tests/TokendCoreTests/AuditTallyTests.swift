import Testing
import TokendCore

/// The audit trail's de-duplication: one record at a token's first release on a connection, a
/// count for the rest, written at the close or when the token changes.
struct AuditTallyTests {
    typealias Tally = AuditTally<String>

    static func released(_ credential: String, token: String, method: String = "ProvideTokenReplacement", variant: String = "")
        -> Tally.Key
    {
        Tally.Key(outcome: .released, credential: credential, method: method, variant: variant, detail: token)
    }

    /// The actions as text, so that tables of expectations read easily.
    static func describe(_ actions: [Tally.Action]) -> [String] {
        actions.map { action in
            switch action {
            case .first(let key, let record): "first \(key.credential) \(key.method) \(key.detail) [\(record)]"
            case .total(let key, let record, let count): "total \(key.credential) \(key.method) \(key.detail) [\(record)] \(count)"
            }
        }
    }

    @Test func aFirstReleaseIsRecordedAtOnceAndRepeatsOnlyCounted() {
        var tally = Tally()
        var built = 0
        let key = Self.released("alice", token: "t1")
        func record(_ text: String) -> String {
            built += 1
            return text
        }
        #expect(Self.describe(tally.note(key) { record("r1") }) == ["first alice ProvideTokenReplacement t1 [r1]"])
        for _ in 0..<999 { #expect(tally.note(key) { record("again") }.isEmpty) }
        // The record is built once, at the first release: the cached path builds nothing.
        #expect(built == 1)
        #expect(Self.describe(tally.close()) == ["total alice ProvideTokenReplacement t1 [r1] 1000"])
        #expect(tally.keyCount == 0)
    }

    @Test func aTokenReleasedOnceHasNoTotal() {
        var tally = Tally()
        _ = tally.note(Self.released("alice", token: "t1")) { "r" }
        _ = tally.note(Self.released("bob", token: "t2")) { "r" }
        #expect(tally.close().isEmpty)
    }

    @Test func aNewTokenClosesTheTotalOfTheOldOne() {
        var tally = Tally()
        _ = tally.note(Self.released("alice", token: "old")) { "r-old" }
        _ = tally.note(Self.released("alice", token: "old")) { "unused" }
        _ = tally.note(Self.released("alice", token: "old")) { "unused" }
        let actions = tally.note(Self.released("alice", token: "new")) { "r-new" }
        #expect(
            Self.describe(actions) == [
                "total alice ProvideTokenReplacement old [r-old] 3", "first alice ProvideTokenReplacement new [r-new]",
            ])
        // The old token is gone from the tally: seeing it again is a first release again.
        #expect(tally.keyCount == 1)
        _ = tally.note(Self.released("alice", token: "new")) { "unused" }
        #expect(Self.describe(tally.close()) == ["total alice ProvideTokenReplacement new [r-new] 2"])
    }

    @Test func otherCredentialsMethodsAndNarrowedTokensAreCountedApart() {
        var tally = Tally()
        let keys = [
            Self.released("alice", token: "a"), Self.released("bob", token: "b"), Self.released("alice", token: "a", method: "Watch"),
            Self.released("alice", token: "n", variant: "scope=read"),
        ]
        for key in keys { #expect(tally.note(key) { "r" }.count == 1) }
        // None of them replaced another: a narrowed token is not a new token of the credential's own.
        #expect(tally.keyCount == 4)
        for key in keys { _ = tally.note(key) { "r" } }
        #expect(tally.close().count == 4)
    }

    @Test func totalsAreWrittenInTheOrderOfFirstRelease() {
        var tally = Tally()
        for name in ["c", "a", "b"] {
            _ = tally.note(Self.released(name, token: name)) { name }
            _ = tally.note(Self.released(name, token: name)) { name }
        }
        #expect(Self.describe(tally.close()).map { String($0.split(separator: " ")[1]) } == ["c", "a", "b"])
    }

    @Test func refusalsAreCountedPerReasonAndReplaceNothing() {
        var tally = Tally()
        let denied = Tally.Key(outcome: .refused, credential: "alice", method: "ProvideTokenReplacement", detail: "not a reader")
        let ended = Tally.Key(outcome: .refused, credential: "alice", method: "ProvideTokenReplacement", detail: "the login has ended")
        #expect(tally.note(denied) { "r" }.count == 1)
        for _ in 0..<9 { #expect(tally.note(denied) { "r" }.isEmpty) }
        #expect(Self.describe(tally.note(ended) { "r" }) == ["first alice ProvideTokenReplacement the login has ended [r]"])
        #expect(Self.describe(tally.close()) == ["total alice ProvideTokenReplacement not a reader [r] 10"])
    }
}

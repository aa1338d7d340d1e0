import Testing
import TokendCore

@testable import TokendStorage

/// A credential's narrowed tokens as the one secret its row seals.
struct NarrowedTokenCodingTests {
    static let token = NarrowedToken(
        key: "read\u{1F}https://api.test/", scope: "read", resource: "https://api.test/", accessToken: SecretString("at-\"quoted\"\n"),
        tokenType: "Bearer", issuedAt: Timestamp(millisecondsSince1970: 1_000), expiresAt: Timestamp(millisecondsSince1970: 2_000),
        enrolledAt: Timestamp(millisecondsSince1970: 500))

    @Test func tokensRoundTripAndNoneIsNoColumn() throws {
        #expect(NarrowedTokenCoding.encode([]) == nil)
        var other = Self.token
        (other.key, other.scope, other.resource) = ("\u{1F}urn:x", nil, "urn:x")
        let secret = try #require(NarrowedTokenCoding.encode([Self.token, other]))
        #expect(NarrowedTokenCoding.decode(secret) == [Self.token, other])
    }

    /// Narrowed tokens can be got again: what cannot be read is left out, and the credential's
    /// own tokens stay readable.
    @Test(arguments: ["", "{}", "not json", "[1]", #"[{"key":"k"}]"#])
    func unreadableTokensAreLeftOut(text: String) {
        #expect(NarrowedTokenCoding.decode(SecretString(text)).isEmpty)
    }

    @Test func aTokenWithoutItsLoginIsLeftOutAndTheOthersKept() throws {
        let good = try #require(NarrowedTokenCoding.encode([Self.token])).value
        let mixed = "[" + #"{"key":"k","accessToken":"a","tokenType":"Bearer","issuedAt":1,"expiresAt":2}"# + "," + good.dropFirst()
        #expect(NarrowedTokenCoding.decode(SecretString(mixed)) == [Self.token])
    }
}

import Testing
import TokendJSON

@testable import TokendCore

struct TokenNarrowingTests {
    @Test func neitherParameterMeansTheCredentialsOwnToken() throws {
        #expect(try TokenNarrowing(scope: nil, resource: nil) == nil)
    }

    @Test func scopeValuesAreSortedAndDistinctSoEqualRequestsShareAKey() throws {
        let a = try #require(try TokenNarrowing(scope: "write read", resource: nil))
        let b = try #require(try TokenNarrowing(scope: "read  write read", resource: nil))
        #expect(a.scope == "read write")
        #expect(a.key == b.key)
        let withResource = try #require(try TokenNarrowing(scope: "read write", resource: "https://api.test/"))
        #expect(withResource.key != a.key)
        let resourceOnly = try #require(try TokenNarrowing(scope: nil, resource: "https://api.test/"))
        #expect(resourceOnly.scope == nil && resourceOnly.key != withResource.key)
        #expect(withResource.description == "scope 'read write' and resource 'https://api.test/'")
    }

    @Test(arguments: [
        ("", "scope"), ("   ", "scope"), ("read\u{7F}", "scope"), ("re\"ad", "scope"), ("re\\ad", "scope"), ("lecture\u{E9}", "scope"),
        (String(repeating: "x", count: 2049), "scope"),
        ((0..<33).map { "s\($0)" }.joined(separator: " "), "scope"),
    ])
    func malformedScopesNameTheParameter(scope: String, parameter: String) {
        #expect(throws: NarrowingParameterError.self) { try TokenNarrowing(scope: scope, resource: nil) }
        do {
            _ = try TokenNarrowing(scope: scope, resource: nil)
        } catch {
            #expect(error.parameter == parameter)
        }
    }

    @Test(arguments: [
        "", "api.test", "/relative", ":nothing", "1http://x", "https://api.test/#fragment", "https://api test/", "https:",
        "https://api.test/\u{E9}", "https://x/" + String(repeating: "a", count: 2040),
    ])
    func resourcesMustBeAbsoluteURIsWithoutFragment(resource: String) {
        #expect(throws: NarrowingParameterError.self) { try TokenNarrowing(scope: nil, resource: resource) }
    }

    @Test(arguments: ["https://api.test/", "urn:example:orders", "http://127.0.0.1:8080/v1?x=1", "spiffe://cluster/ns/svc"])
    func absoluteURIsAreResources(resource: String) throws {
        #expect(try TokenNarrowing(scope: nil, resource: resource)?.resource == resource)
    }

    @Test func aScopeWithinTheCredentialsIsAllowedAndAWiderOneIsNot() throws {
        let read = try #require(try TokenNarrowing(scope: "read", resource: nil))
        #expect(NarrowingRules.refusal(of: read, grantedScope: "read write") == nil)
        let admin = try #require(try TokenNarrowing(scope: "read admin", resource: nil))
        let refusal = try #require(NarrowingRules.refusal(of: admin, grantedScope: "read write"))
        #expect(refusal.contains("'admin'") && refusal.contains("'read write'"))
        #expect(NarrowingRules.refusal(of: read, grantedScope: nil)?.contains("unknown") == true)
        // A resource alone narrows nothing tokend could check: the provider decides.
        let resource = try #require(try TokenNarrowing(scope: nil, resource: "https://api.test/"))
        #expect(NarrowingRules.refusal(of: resource, grantedScope: nil) == nil)
    }

    static func jwt(_ claims: JSONObject) -> String {
        let header = Base64URL.encode(Array(#"{"alg":"none"}"#.utf8))
        return header + "." + Base64URL.encode(Array(JSONWriter.string(.object(claims)).utf8)) + ".sig"
    }

    @Test func anAnswerWiderThanAskedIsNotANarrowedToken() throws {
        let read = try #require(try TokenNarrowing(scope: "read", resource: nil))
        #expect(NarrowingRules.problem(with: read, responseScope: "read", accessToken: "opaque") == nil)
        // RFC 6749 §5.1: an omitted scope is the one asked for.
        #expect(NarrowingRules.problem(with: read, responseScope: nil, accessToken: "opaque") == nil)
        #expect(NarrowingRules.problem(with: read, responseScope: "read write", accessToken: "opaque")?.contains("wider") == true)
        // Without a scope in the response, the JWT's scope claim (RFC 9068) tells.
        let wide = Self.jwt(["scope": .string("openid read offline_access")])
        #expect(NarrowingRules.problem(with: read, responseScope: nil, accessToken: wide)?.contains("'openid read offline_access'") == true)
        // Every statement counts: a JWT wider than the response's scope, an `scp` list.
        #expect(NarrowingRules.problem(with: read, responseScope: "read", accessToken: wide) != nil)
        #expect(NarrowingRules.problem(with: read, responseScope: nil, accessToken: Self.jwt(["scp": .array([.string("read")])])) == nil)
        #expect(
            NarrowingRules.problem(
                with: read, responseScope: nil, accessToken: Self.jwt(["scp": .array([.string("read"), .string("admin")])]))
                != nil)
        // Narrower than asked is fine: never wider is the rule.
        let both = try #require(try TokenNarrowing(scope: "read write", resource: nil))
        #expect(NarrowingRules.problem(with: both, responseScope: "read", accessToken: "opaque") == nil)
    }

    @Test func aJWTForAnotherAudienceIsNotNarrowedToTheResource() throws {
        let api = try #require(try TokenNarrowing(scope: nil, resource: "https://api.test/"))
        #expect(NarrowingRules.problem(with: api, responseScope: nil, accessToken: Self.jwt(["aud": .string("https://api.test/")])) == nil)
        #expect(
            NarrowingRules.problem(
                with: api, responseScope: nil, accessToken: Self.jwt(["aud": .array([.string("x"), .string("https://api.test/")])])) == nil)
        let other = NarrowingRules.problem(with: api, responseScope: nil, accessToken: Self.jwt(["aud": .string("openid read")]))
        #expect(other?.contains("not the requested resource") == true)
        #expect(NarrowingRules.problem(with: api, responseScope: nil, accessToken: "opaque") == nil)
    }

    @Test func scopeLostIsWhatTheCredentialHadAndNoLongerHas() {
        #expect(NarrowingRules.scopeLost(before: "read write", after: "read") == ["write"])
        #expect(NarrowingRules.scopeLost(before: "read write", after: "write read") == nil)
        #expect(NarrowingRules.scopeLost(before: "read", after: "read write") == nil)
        #expect(NarrowingRules.scopeLost(before: nil, after: "read") == nil)
        #expect(NarrowingRules.scopeLost(before: "read", after: nil) == nil)
    }

    @Test func aCredentialKeepsOneTokenPerRequestAndAtMostSixteen() {
        var credential = Credential(
            userIdentifier: "alice", provider: "p", accessToken: SecretString("a"), refreshToken: nil, tokenType: "Bearer", scope: nil,
            expiresAt: Timestamp(millisecondsSince1970: 0), issuedAt: Timestamp(millisecondsSince1970: 0),
            sessionStartedAt: Timestamp(millisecondsSince1970: 0), readers: [],
            enrolment: Enrolment(uid: 0, pid: 0, at: Timestamp(millisecondsSince1970: 0)))
        func token(_ key: String, expiresAt: Int64) -> NarrowedToken {
            NarrowedToken(
                key: key, scope: key, resource: nil, accessToken: SecretString("t-\(key)"), tokenType: "Bearer",
                issuedAt: Timestamp(millisecondsSince1970: 0), expiresAt: Timestamp(millisecondsSince1970: expiresAt),
                enrolledAt: Timestamp(millisecondsSince1970: 0))
        }
        for index in 0..<16 { credential.keep(token("k\(index)", expiresAt: 1_000 + Int64(index))) }
        credential.keep(token("k3", expiresAt: 5_000))
        #expect(credential.narrowedTokens.count == 16)
        #expect(credential.narrowedToken(for: "k3")?.expiresAt == Timestamp(millisecondsSince1970: 5_000))
        credential.keep(token("new", expiresAt: 9_000))
        #expect(credential.narrowedTokens.count == 16)
        #expect(credential.narrowedToken(for: "k0") == nil, "the one expiring first made room")
        #expect(credential.narrowedToken(for: "new") != nil)
        // A token kept from another login (another enrolment) is not this credential's.
        credential.enrolment.at = Timestamp(millisecondsSince1970: 1)
        #expect(credential.narrowedToken(for: "new") == nil)
    }
}

/// How often callers may make tokend ask for narrowed tokens.
struct NarrowedGrantLimitTests {
    static func at(_ seconds: Int64) -> Timestamp { Timestamp(millisecondsSince1970: seconds * 1000) }

    @Test func oneGrantPerRequestAndInterval() {
        let interval = Duration.seconds(30)
        #expect(NarrowedGrantLimit.decide(lastGrantOfRequest: nil, grantsOfCredential: [], now: Self.at(100), interval: interval) == .grant)
        #expect(
            NarrowedGrantLimit.decide(
                lastGrantOfRequest: Self.at(90), grantsOfCredential: [Self.at(90)], now: Self.at(100), interval: interval)
                == .sameRequestTooSoon(nextAllowed: Self.at(120)))
        #expect(
            NarrowedGrantLimit.decide(
                lastGrantOfRequest: Self.at(70), grantsOfCredential: [Self.at(70)], now: Self.at(100), interval: interval)
                == .grant)
    }

    @Test func aCredentialGetsAtMostItsBudgetAcrossRequests() {
        let interval = Duration.seconds(30)
        let sixteen = (0..<16).map { Self.at(80 + Int64($0)) }
        #expect(
            NarrowedGrantLimit.decide(lastGrantOfRequest: nil, grantsOfCredential: sixteen, now: Self.at(100), interval: interval)
                == .credentialBudgetSpent(nextAllowed: Self.at(110)))
        #expect(
            NarrowedGrantLimit.decide(
                lastGrantOfRequest: nil, grantsOfCredential: sixteen.dropFirst(), now: Self.at(100), interval: interval)
                == .grant)
        // Grants older than the interval no longer count.
        #expect(
            NarrowedGrantLimit.decide(lastGrantOfRequest: nil, grantsOfCredential: sixteen, now: Self.at(111), interval: interval) == .grant
        )
    }
}

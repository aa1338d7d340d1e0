import Testing
import TokendCore
import TokendJSON

struct LoginURLTests {
    @Test func percentEncodingKeepsOnlyUnreservedCharacters() {
        #expect(LoginURL.percentEncode("a b/c?d=é~") == "a%20b%2Fc%3Fd%3D%C3%A9~")
    }

    @Test func queryItemsDecodeAndRefuseMalformedEscapes() throws {
        let items = try #require(LoginURL.queryItems(of: "http://h/p?a=1&b=x%2By+z&c#frag=2"))
        #expect(items.map(\.name) == ["a", "b", "c"])
        #expect(items.map(\.value) == ["1", "x+y z", ""])
        #expect(LoginURL.queryItems(of: "http://h/p?a=%zz") == nil)
        #expect(LoginURL.queryItems(of: "http://h/p")?.isEmpty == true)
    }

    @Test func targetsCompareOriginAndPath() {
        #expect(LoginURL.target(of: "http://127.0.0.1:8080/callback?code=1") == "http://127.0.0.1:8080/callback")
        #expect(LoginURL.target(of: "https://App.example/cb#x") == "https://app.example:443/cb")
        #expect(LoginURL.target(of: "not a url") == nil)
    }

    @Test func authorizationURLCarriesPKCEStateAndNonce() {
        let url = LoginRequest.authorizationURL(
            endpoint: "https://idp/authorize", clientID: "c", redirectURI: "http://127.0.0.1:1234/callback", scope: "openid read",
            state: "S", codeChallenge: "CH", nonce: "N"
        )
        #expect(
            url
                == "https://idp/authorize?response_type=code&client_id=c&redirect_uri=http%3A%2F%2F127.0.0.1%3A1234%2Fcallback&scope=openid%20read&state=S&code_challenge=CH&code_challenge_method=S256&nonce=N"
        )
    }

    @Test func hatLoginURLPutsTheQueryInTheFragment() {
        let url = LoginRequest.hatLoginURL(
            origin: "https://pda.example", application: "app", redirect: "http://127.0.0.1:9/ok", fallback: "http://127.0.0.1:9/no")
        #expect(
            url
                == "https://pda.example/#/hatlogin?name=app&redirect=http%3A%2F%2F127.0.0.1%3A9%2Fok&fallback=http%3A%2F%2F127.0.0.1%3A9%2Fno"
        )
    }
}

struct AuthorizationRedirectTests {
    let redirect = "http://127.0.0.1:4000/callback"

    @Test func theCodeOfTheRightRedirectWithTheRightState() throws {
        #expect(try AuthorizationRedirect.code(from: redirect + "?code=abc&state=S1", redirectURI: redirect, state: "S1") == "abc")
    }

    @Test(arguments: [
        ("http://127.0.0.1:4000/callback?code=abc&state=S2", "state does not match"),
        ("http://127.0.0.1:4000/callback?code=abc", "carries no state"),
        ("http://127.0.0.1:4000/callback?code=abc&state=S1&state=S2", "more than once"),
        ("http://127.0.0.1:4001/callback?code=abc&state=S1", "not the redirect of this login"),
        ("http://127.0.0.1:4000/other?code=abc&state=S1", "not the redirect of this login"),
        ("http://127.0.0.1:4000/callback?state=S1", "no authorization code"),
        ("http://127.0.0.1:4000/callback?error=access_denied&state=S1", "refused the login (access_denied)"),
    ])
    func badRedirectsAreRefused(url: String, message: String) {
        #expect {
            _ = try AuthorizationRedirect.code(from: url, redirectURI: redirect, state: "S1")
        } throws: { error in
            (error as? LoginError)?.reason.contains(message) == true
        }
    }

    @Test func anErrorRedirectWithAForeignStateIsAStateMismatch() {
        // The state is checked before the error, so a forged redirect cannot pose as a denial.
        #expect(throws: LoginError.self) {
            try AuthorizationRedirect.code(from: redirect + "?error=x&state=evil", redirectURI: redirect, state: "S1")
        }
    }

    @Test func hatRedirects() throws {
        let ok = "http://127.0.0.1:9/hat/ok"
        let no = "https://app.example/hat/no"
        #expect(try AuthorizationRedirect.hatToken(from: ok + "?token=T.K.N", redirect: ok, fallback: no) == "T.K.N")
        #expect(
            throws: LoginError(
                "the PDA sent the browser to the fallback URL: the login was refused or cancelled", oauthError: "access_denied")
        ) {
            try AuthorizationRedirect.hatToken(from: no + "?x=1", redirect: ok, fallback: no)
        }
        #expect(throws: LoginError.self) { try AuthorizationRedirect.hatToken(from: ok, redirect: ok, fallback: no) }
        #expect(throws: LoginError.self) {
            try AuthorizationRedirect.hatToken(from: "https://evil.example/hat/ok?token=T", redirect: ok, fallback: no)
        }
    }

    @Test func aHATTokenFromBeforeTheLoginIsRefused() throws {
        let start = Timestamp(secondsSince1970: 1_700_000_000)
        let fresh = JWTTestTokens.make(header: ["alg": .string("RS256")], claims: ["iat": .int(1_700_000_010)])
        let stale = JWTTestTokens.make(header: ["alg": .string("RS256")], claims: ["iat": .int(1_699_990_000)])
        try LoginRequest.checkFreshness(token: fresh, loginStartedAt: start)
        #expect(throws: LoginError.self) { try LoginRequest.checkFreshness(token: stale, loginStartedAt: start) }
        #expect(throws: LoginError.self) { try LoginRequest.checkFreshness(token: "opaque", loginStartedAt: start) }
    }
}

struct DevicePollingTests {
    func body(_ text: String) -> [UInt8] { Array(text.utf8) }

    @Test func pendingWaitsSlowDownAddsFiveSecondsTerminalErrorsFail() {
        var polling = DevicePolling(interval: .seconds(5))
        #expect(polling.next(status: 400, body: body(#"{"error":"authorization_pending"}"#)) == .wait(.seconds(5)))
        #expect(polling.next(status: 400, body: body(#"{"error":"slow_down"}"#)) == .wait(.seconds(10)))
        #expect(polling.next(status: 400, body: body(#"{"error":"authorization_pending"}"#)) == .wait(.seconds(10)), "slow_down lasts")
        #expect(polling.slowDowns == 1)
        #expect(polling.next(status: 503, body: body("<html>")) == .wait(.seconds(10)))
        guard case .fail(let denied) = polling.next(status: 400, body: body(#"{"error":"access_denied"}"#)) else {
            Issue.record()
            return
        }
        #expect(denied.oauthError == "access_denied")
        guard case .fail(let expired) = polling.next(status: 400, body: body(#"{"error":"expired_token"}"#)) else {
            Issue.record()
            return
        }
        #expect(expired.oauthError == "expired_token" && expired.reason.contains("expired"))
        guard
            case .success(let response) = polling.next(
                status: 200, body: body(#"{"access_token":"a","refresh_token":"r","expires_in":60}"#))
        else {
            Issue.record()
            return
        }
        #expect(response.refreshToken?.value == "r")
        guard case .fail = polling.next(status: 200, body: body(#"{"token_type":"Bearer"}"#)) else {
            Issue.record()
            return
        }
    }

    @Test func transportFailuresBackOff() {
        var polling = DevicePolling(interval: .seconds(5))
        #expect(polling.transportFailure() == .wait(.seconds(10)))
        #expect(polling.transportFailure() == .wait(.seconds(20)))
    }

    @Test func deviceAuthorizationResponses() throws {
        let parsed = try DeviceAuthorization.parse(
            Array(#"{"device_code":"D","user_code":"ABCD-EFGH","verification_uri":"https://idp/device","expires_in":600}"#.utf8))
        #expect(parsed.interval == .seconds(5) && parsed.expiresIn == .seconds(600) && parsed.userCode == "ABCD-EFGH")
        #expect(!"\(parsed)".contains("\"D\"") && "\(parsed)".contains("<redacted>"))
        let capped = try DeviceAuthorization.parse(
            Array(#"{"device_code":"D","user_code":"U","verification_url":"https://idp/d","expires_in":999999,"interval":0}"#.utf8))
        #expect(capped.expiresIn == DeviceAuthorization.maximumLifetime && capped.interval == .seconds(1))
        for bad in [
            #"{"user_code":"U","verification_uri":"https://i/d","expires_in":60}"#,
            #"{"device_code":"D","user_code":"U","verification_uri":"nope","expires_in":60}"#,
            #"{"device_code":"D","user_code":"U","verification_uri":"https://i/d"}"#, "[]",
        ] {
            #expect(throws: LoginError.self) { try DeviceAuthorization.parse(Array(bad.utf8)) }
        }
    }
}

enum JWTTestTokens {
    static func make(header: JSONObject, claims: JSONObject) -> String {
        func part(_ object: JSONObject) -> String { Base64URL.encode(Array(JSONWriter.string(.object(object)).utf8)) }
        return part(header) + "." + part(claims) + ".c2ln"
    }
}

struct JWTExpectationsTests {
    let now = Timestamp(secondsSince1970: 1_700_000_000)
    let expectations = JWTExpectations(
        issuer: "https://idp.example/o", audience: "client", authorizedParty: "client", nonce: "N1", what: "ID token")

    func claims(_ changes: JSONObject = [:]) -> JSONObject {
        var claims: JSONObject = [
            "iss": .string("https://idp.example/o"), "aud": .string("client"), "exp": .int(1_700_000_300), "iat": .int(1_699_999_990),
            "nonce": .string("N1"),
        ]
        for (key, value) in changes.members { claims[key] = value }
        return claims
    }

    @Test func aGoodIDTokenPasses() throws {
        try expectations.checkClaims(claims(), now: now)
        try expectations.checkClaims(claims(["aud": .array([.string("other"), .string("client")]), "azp": .string("client")]), now: now)
        try expectations.checkClaims(claims(["iss": .string("https://idp.example/o/")]), now: now)
    }

    @Test(arguments: [
        ("iss", JSONValue.string("https://evil.example/o"), "issued by"),
        ("aud", JSONValue.string("another-client"), "another audience"),
        ("aud", JSONValue.null, "no aud"),
        ("exp", JSONValue.int(1_699_999_000), "has expired"),
        ("nonce", JSONValue.string("N2"), "nonce does not match"),
        ("nonce", JSONValue.null, "no nonce"),
        ("nbf", JSONValue.int(1_700_000_600), "not valid yet"),
        ("iat", JSONValue.int(1_700_000_600), "in the future"),
    ])
    func badClaimsAreRefused(claim: String, value: JSONValue, message: String) {
        var bad = claims()
        if value == .null { bad[claim] = nil } else { bad[claim] = value }
        #expect {
            try expectations.checkClaims(bad, now: now)
        } throws: { error in
            (error as? LoginError)?.reason.contains(message) == true
        }
    }

    @Test func anotherAuthorizedPartyIsRefused() {
        #expect(throws: LoginError.self) {
            try expectations.checkClaims(claims(["aud": .array([.string("client"), .string("x")]), "azp": .string("x")]), now: now)
        }
    }

    @Test(arguments: ["none", "HS256", "HS512", ""])
    func symmetricAndUnsignedAlgorithmsAreRefused(alg: String) throws {
        let jwt = try #require(DecodedJWT(JWTTestTokens.make(header: ["alg": .string(alg), "kid": .string("k")], claims: claims())))
        #expect(throws: LoginError.self) { try expectations.checkAlgorithm(jwt) }
    }

    @Test func decodingNeedsThreeParts() throws {
        #expect(DecodedJWT("a.b") == nil)
        #expect(DecodedJWT("opaque-token") == nil)
        let jwt = try #require(DecodedJWT(JWTTestTokens.make(header: ["alg": .string("RS256"), "kid": .string("k1")], claims: claims())))
        #expect(jwt.algorithm == "RS256" && jwt.keyID == "k1")
        try expectations.checkAlgorithm(jwt)
    }
}

import Testing
import TokendJSON

@testable import TokendCore

/// An independent base64url encoder (no padding), so JWTs in these tests do not depend on the
/// code under test.
func base64URL(_ text: String) -> String {
    let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
    let bytes = Array(text.utf8)
    var output = ""
    var index = 0
    while index < bytes.count {
        let chunk = Array(bytes[index..<min(index + 3, bytes.count)])
        let b0 = Int(chunk[0])
        let b1 = chunk.count > 1 ? Int(chunk[1]) : 0
        let b2 = chunk.count > 2 ? Int(chunk[2]) : 0
        output.append(alphabet[b0 >> 2])
        output.append(alphabet[(b0 & 0x3) << 4 | b1 >> 4])
        if chunk.count > 1 { output.append(alphabet[(b1 & 0xF) << 2 | b2 >> 6]) }
        if chunk.count > 2 { output.append(alphabet[b2 & 0x3F]) }
        index += 3
    }
    return output
}

func makeJWT(payload: String, header: String = #"{"alg":"RS256","typ":"JWT"}"#, signature: String = "c2lnbmF0dXJl") -> String {
    "\(base64URL(header)).\(base64URL(payload)).\(signature)"
}

struct Base64URLTests {
    /// RFC 4648 §10 test vectors, without padding and with it.
    @Test(arguments: [
        ("", "", ""), ("f", "Zg", "Zg=="), ("fo", "Zm8", "Zm8="), ("foo", "Zm9v", "Zm9v"), ("foob", "Zm9vYg", "Zm9vYg=="),
        ("fooba", "Zm9vYmE", "Zm9vYmE="), ("foobar", "Zm9vYmFy", "Zm9vYmFy"),
    ])
    func rfc4648Vectors(plain: String, unpadded: String, padded: String) {
        #expect(Base64URL.decode(unpadded) == Array(plain.utf8))
        #expect(Base64URL.decode(padded) == Array(plain.utf8))
        #expect(Base64URL.encode(Array(plain.utf8)) == unpadded)
        #expect(base64URL(plain) == unpadded)
    }

    @Test func urlSafeAlphabet() {
        // 0xFB 0xFF 0xBF is "+/+/" in standard base64 and "-_-_" in base64url.
        #expect(Base64URL.encode([0xFB, 0xFF, 0xBF]) == "-_-_")
        #expect(Base64URL.decode("-_-_") == [0xFB, 0xFF, 0xBF])
        #expect(Base64URL.encode([0xFF, 0xEF]) == "_-8")
        #expect(Base64URL.decode("_-8") == [0xFF, 0xEF])
        #expect(Base64URL.decode("_-8=") == [0xFF, 0xEF])
    }

    @Test func allByteValuesRoundTrip() {
        let bytes = (0...255).map(UInt8.init)
        for length in [0, 1, 2, 3, 4, 5, 100, 255, 256] {
            let slice = Array(bytes.prefix(length))
            let encoded = Base64URL.encode(slice)
            #expect(!encoded.contains("=") && !encoded.contains("+") && !encoded.contains("/"))
            #expect(Base64URL.decode(encoded) == slice)
        }
    }

    @Test(arguments: ["Zm9v!", "Zm 9v", "Zm9v\n", "Zm9*", "Zg==Zg", "Zg=a", "Z", "Zm9vY", "é", "Zm9v.", "====Zg"])
    func rejectsInvalidInput(text: String) {
        #expect(Base64URL.decode(text) == nil)
    }

    @Test func decodesSubstrings() {
        let token = "aaa.Zm9v.ccc"
        let middle = token.split(separator: ".")[1]
        #expect(Base64URL.decode(middle) == Array("foo".utf8))
    }
}

struct JWTTimeClaimsTests {
    @Test func readsTimeClaims() throws {
        let jwt = makeJWT(payload: #"{"iss":"https://idp.example","sub":"alice","iat":1700000000,"exp":1700003600}"#)
        let claims = try #require(JWTTimeClaims(jwt: jwt))
        #expect(claims.issuedAt == Timestamp(secondsSince1970: 1_700_000_000))
        #expect(claims.expiresAt == Timestamp(secondsSince1970: 1_700_003_600))
        #expect(claims.issuer == "https://idp.example")
        #expect(claims.subject == "alice")
    }

    @Test func fractionalIat() throws {
        let claims = try #require(JWTTimeClaims(jwt: makeJWT(payload: #"{"iat":1700000000.25,"exp":1700003600.5}"#)))
        #expect(claims.issuedAt == Timestamp(millisecondsSince1970: 1_700_000_000_250))
        #expect(claims.expiresAt == Timestamp(millisecondsSince1970: 1_700_003_600_500))
    }

    @Test func missingOrUnusableClaimsAreNil() throws {
        let claims = try #require(JWTTimeClaims(jwt: makeJWT(payload: #"{"iat":"yesterday","exp":-5,"iss":7,"nbf":1}"#)))
        #expect(claims.issuedAt == nil)
        #expect(claims.expiresAt == nil)
        #expect(claims.issuer == nil)
        #expect(claims.subject == nil)
        let huge = try #require(JWTTimeClaims(jwt: makeJWT(payload: #"{"exp":1e300}"#)))
        #expect(huge.expiresAt == nil)
        let empty = try #require(JWTTimeClaims(jwt: makeJWT(payload: "{}")))
        #expect(empty == JWTTimeClaims(jwt: makeJWT(payload: "{}")))
        #expect(empty.expiresAt == nil)
    }

    @Test func unsignedJWTWithEmptySignatureIsRead() throws {
        let claims = try #require(JWTTimeClaims(jwt: makeJWT(payload: #"{"exp":2000000000}"#, signature: "")))
        #expect(claims.expiresAt == Timestamp(secondsSince1970: 2_000_000_000))
    }

    @Test(arguments: [
        "", "opaque-access-token", "2YotnFZFEjr1zCsicMWpAA", "a.b", "a.b.c.d", "..", "x.!!!.y", "x.\(base64URL("not json")).y",
        "x.\(base64URL("[1,2]")).y", "x.\(base64URL("\"string\"")).y", "x.\(base64URL("{\"exp\":1")).y",
        "x.\(base64URL(#"{"exp":1,"exp":2}"#)).y",
    ])
    func opaqueTokensAreNotJWTs(token: String) {
        #expect(JWTTimeClaims(jwt: token) == nil)
    }
}

struct TokenResponseTests {
    func parse(_ json: String) throws(TokenResponseError) -> TokenResponse {
        try TokenResponse.parse(Array(json.utf8))
    }

    func parseError(_ json: String) -> TokenResponseError? {
        do {
            _ = try parse(json)
            return nil
        } catch {
            return error
        }
    }

    @Test func parsesAFullResponse() throws {
        let response = try parse(
            #"""
            {"access_token":"2YotnFZFEjr1zCsicMWpAA","token_type":"example","expires_in":3600,
             "refresh_token":"tGzv3JOkF0XG5Qx2TlKWIA","scope":"read write","id_token":"eyJ.x.y","example_parameter":"example_value"}
            """#)
        #expect(response.accessToken.value == "2YotnFZFEjr1zCsicMWpAA")
        #expect(response.refreshToken?.value == "tGzv3JOkF0XG5Qx2TlKWIA")
        #expect(response.tokenType == "example")
        #expect(response.expiresIn == .seconds(3600))
        #expect(response.scope == "read write")
        #expect(response.idToken?.value == "eyJ.x.y")
    }

    @Test func minimalResponseGetsDefaults() throws {
        let response = try parse(#"{"access_token":"abc"}"#)
        #expect(response == TokenResponse(accessToken: SecretString("abc")))
        #expect(response.tokenType == "Bearer")
        #expect(response.refreshToken == nil)
        #expect(response.expiresIn == nil)
    }

    @Test func nullOptionalFieldsAreAbsent() throws {
        let response = try parse(
            #"{"access_token":"abc","refresh_token":null,"token_type":null,"expires_in":null,"scope":null,"id_token":null}"#)
        #expect(response == TokenResponse(accessToken: SecretString("abc")))
    }

    @Test(arguments: [
        (#"{"access_token":"a","expires_in":"3600"}"#, Duration.seconds(3600)),
        (#"{"access_token":"a","expires_in":3600.0}"#, .seconds(3600)),
        (#"{"access_token":"a","expires_in":3153600000}"#, .seconds(3_153_600_000)),
        (#"{"access_token":"a","expires_in":9223372036854775807}"#, .seconds(Int64.max)),
    ])
    func expiresInForms(json: String, expected: Duration) throws {
        let response = try parse(json)
        #expect(response.expiresIn == expected)
        #expect(response.expiresInIgnored == nil)
    }

    /// An unusable expires_in does not make the tokens unusable (the provider issued them and
    /// may have rotated the refresh token): it is ignored, with a reason that never quotes it.
    @Test(arguments: [
        (#"{"access_token":"a","expires_in":"soon"}"#, "expires_in is not a whole number of seconds"),
        (#"{"access_token":"a","expires_in":-1}"#, "expires_in is negative"),
        (#"{"access_token":"a","expires_in":"-5"}"#, "expires_in is negative"),
        (#"{"access_token":"a","expires_in":0}"#, "expires_in is 0"),
        (#"{"access_token":"a","expires_in":"0"}"#, "expires_in is 0"),
        (#"{"access_token":"a","expires_in":3600.5}"#, "expires_in is not a whole number of seconds"),
        (#"{"access_token":"a","expires_in":true}"#, "expires_in is not a whole number of seconds"),
        (#"{"access_token":"a","expires_in":[3600]}"#, "expires_in is not a whole number of seconds"),
    ])
    func unusableExpiresInIsIgnored(json: String, reason: String) throws {
        let response = try parse(json)
        #expect(response.expiresIn == nil)
        #expect(response.expiresInIgnored?.description == reason)
        let lifetime = response.lifetime(receivedAt: Timestamp(secondsSince1970: 1000), assumed: .seconds(300))
        #expect(lifetime.expiresAt == Timestamp(secondsSince1970: 1300))
        #expect(lifetime.assumedBecause == reason)
    }

    @Test func missingAccessToken() {
        #expect(parseError(#"{"token_type":"Bearer"}"#)?.description == "the response has no access_token")
    }

    @Test func emptyAccessToken() {
        #expect(parseError(#"{"access_token":""}"#)?.description == "access_token is empty, expected a non-empty string")
    }

    @Test(arguments: [
        (#"{"access_token":42}"#, "a number"), (#"{"access_token":null}"#, "null"), (#"{"access_token":["a"]}"#, "an array"),
        (#"{"access_token":{"a":1}}"#, "an object"), (#"{"access_token":true}"#, "a boolean"),
    ])
    func nonStringAccessToken(json: String, typeName: String) {
        #expect(parseError(json)?.description == "access_token is \(typeName), expected a non-empty string")
    }

    @Test(arguments: ["abc\\ndef", "abc def\\u0000", "t\\u00f6ken", "tab\\there", "del\\u007f", "emoji🎉"])
    func nonPrintableTokensAreRejected(token: String) {
        #expect(parseError(#"{"access_token":"\#(token)"}"#)?.description == "access_token contains characters a token cannot have")
        #expect(
            parseError(#"{"access_token":"ok","refresh_token":"\#(token)"}"#)?.description
                == "refresh_token is not a non-empty printable string")
    }

    @Test func printableTokensWithSpacesAndPunctuationAreAccepted() throws {
        // VSCHAR is %x20-7E.
        let token = #" !#$%&'()*+,-./0123456789:;<=>?@AZ[]^_`az{|}~"#
        #expect(try parse(#"{"access_token":"\#(token)"}"#).accessToken.value == token)
    }

    @Test func overlongTokensAreRejected() {
        let long = String(repeating: "a", count: 16385)
        #expect(parseError(#"{"access_token":"\#(long)"}"#) != nil)
        let limit = String(repeating: "a", count: 16384)
        #expect(parseError(#"{"access_token":"\#(limit)"}"#) == nil)
    }

    @Test(arguments: [
        #"{"access_token":"a","refresh_token":""}"#, #"{"access_token":"a","refresh_token":5}"#,
        #"{"access_token":"a","token_type":""}"#, #"{"access_token":"a","token_type":1}"#,
        #"{"access_token":"a","scope":["read"]}"#,
    ])
    func badOptionalFieldsAreRejected(json: String) {
        #expect(parseError(json) != nil)
    }

    @Test func tokenTypeLengthLimit() {
        #expect(parseError(#"{"access_token":"a","token_type":"\#(String(repeating: "b", count: 64))"}"#) == nil)
        #expect(
            parseError(#"{"access_token":"a","token_type":"\#(String(repeating: "b", count: 65))"}"#)?.description
                == "token_type is not a short string")
    }

    @Test(arguments: ["", "not json", "[1]", "\"token\"", "null", "{\"access_token\":\"a\",\"access_token\":\"b\"}"])
    func nonObjectOrInvalidBodiesAreRejected(body: String) {
        let error = parseError(body)
        #expect(error != nil)
        if body == "[1]" { #expect(error?.description == "the response is an array, not a JSON object") }
        if body == "not json" { #expect(error?.description.hasPrefix("the response is not valid JSON") == true) }
    }

    @Test func errorsNeverContainTokenValues() {
        let secret = "SuperSecretValue"
        let bodies = [
            #"{"access_token":"\#(secret)\n"}"#, #"{"access_token":"\#(secret)","refresh_token":"\#(secret)\t"}"#,
            #"{"access_token":"\#(secret)","token_type":7}"#,
        ]
        for body in bodies {
            let error = parseError(body)
            #expect(error != nil)
            #expect(error?.description.contains(secret) == false)
        }
        // An ignored expires_in is reported without its value.
        let ignored = try? parse(#"{"access_token":"a","expires_in":"\#(secret)"}"#)
        #expect(ignored?.expiresInIgnored?.description.contains(secret) == false)
    }
}

struct TokenLifetimeTests {
    let received = Timestamp(secondsSince1970: 1_700_000_100)

    @Test func jwtExpAndIatWin() throws {
        let jwt = makeJWT(payload: #"{"iat":1700000000,"exp":1700000900}"#)
        let response = TokenResponse(accessToken: SecretString(jwt), expiresIn: .seconds(3600))
        let lifetime = response.lifetime(receivedAt: received, assumed: .seconds(300))
        #expect(lifetime.issuedAt == Timestamp(secondsSince1970: 1_700_000_000))
        #expect(lifetime.expiresAt == Timestamp(secondsSince1970: 1_700_000_900))
    }

    @Test func jwtExpWithoutIatUsesReceipt() throws {
        let jwt = makeJWT(payload: #"{"exp":1700000900}"#)
        let lifetime = TokenResponse(accessToken: SecretString(jwt)).lifetime(receivedAt: received, assumed: .seconds(300))
        #expect(lifetime.issuedAt == received)
        #expect(lifetime.expiresAt == Timestamp(secondsSince1970: 1_700_000_900))
    }

    @Test func jwtWithoutExpUsesExpiresIn() throws {
        let jwt = makeJWT(payload: #"{"iat":1700000050.5}"#)
        let lifetime = TokenResponse(accessToken: SecretString(jwt), expiresIn: .seconds(600)).lifetime(
            receivedAt: received, assumed: .seconds(300))
        #expect(lifetime.issuedAt == Timestamp(millisecondsSince1970: 1_700_000_050_500))
        #expect(lifetime.expiresAt == Timestamp(secondsSince1970: 1_700_000_700))
    }

    @Test func opaqueTokenUsesExpiresInFromReceipt() throws {
        let lifetime = TokenResponse(accessToken: SecretString("opaque"), expiresIn: .seconds(3600)).lifetime(
            receivedAt: received, assumed: .seconds(300))
        #expect(lifetime.issuedAt == received)
        #expect(lifetime.expiresAt == Timestamp(secondsSince1970: 1_700_003_700))
    }

    @Test func neitherGivesTheAssumedLifetimeAndSaysWhy() {
        let opaque = TokenResponse(accessToken: SecretString("opaque")).lifetime(receivedAt: received, assumed: .seconds(300))
        #expect(opaque.issuedAt == received)
        #expect(opaque.expiresAt == received + .seconds(300))
        #expect(opaque.assumedBecause == "the response has neither expires_in nor a JWT exp")
        let jwt = TokenResponse(accessToken: SecretString(makeJWT(payload: #"{"iat":1700000000}"#))).lifetime(
            receivedAt: received, assumed: .seconds(60))
        #expect(jwt.issuedAt == Timestamp(secondsSince1970: 1_700_000_000))
        #expect(jwt.expiresAt == received + .seconds(60))
        #expect(jwt.assumedBecause != nil)
    }

    @Test func aCallerMustStateALifetime() throws {
        #expect(throws: TokenResponseError.self) {
            try TokenResponse(accessToken: SecretString("opaque")).statedLifetime(receivedAt: received)
        }
        var negative = TokenResponse(accessToken: SecretString("opaque"))
        negative.expiresInIgnored = .negative
        #expect(throws: TokenResponseError.self) { try negative.statedLifetime(receivedAt: received) }
        var zero = TokenResponse(accessToken: SecretString("opaque"))
        zero.expiresInIgnored = .zero
        let expired = try zero.statedLifetime(receivedAt: received)
        #expect(expired.expiresAt == received && expired.assumedBecause == nil)
        let stated = try TokenResponse(accessToken: SecretString("opaque"), expiresIn: .seconds(60)).statedLifetime(receivedAt: received)
        #expect(stated.expiresAt == received + .seconds(60))
    }

    @Test func aKnownLifetimeIsNotAssumed() {
        let lifetime = TokenResponse(accessToken: SecretString("opaque"), expiresIn: .seconds(5)).lifetime(
            receivedAt: received, assumed: .seconds(300))
        #expect(lifetime.assumedBecause == nil)
        #expect(lifetime.expiresAt == received + .seconds(5))
    }

    @Test func parsedResponseEndToEnd() throws {
        let jwt = makeJWT(payload: #"{"sub":"alice","iat":1700000000,"exp":1700003600}"#)
        let response = try TokenResponse.parse(Array(#"{"access_token":"\#(jwt)","token_type":"Bearer","expires_in":10}"#.utf8))
        let lifetime = response.lifetime(receivedAt: received, assumed: .seconds(300))
        #expect(lifetime.expiresAt == Timestamp(secondsSince1970: 1_700_003_600))
    }
}

struct TokenErrorResponseTests {
    func parse(_ json: String) -> TokenErrorResponse? { TokenErrorResponse.parse(Array(json.utf8)) }

    @Test func parsesAnErrorBody() throws {
        let response = try #require(parse(#"{"error":"invalid_grant","error_description":"The refresh token has expired"}"#))
        #expect(response.error == "invalid_grant")
        #expect(response.errorDescription == "The refresh token has expired")
        #expect(response.isPermanent)
    }

    @Test func descriptionIsOptional() throws {
        let response = try #require(parse(#"{"error":"server_error","error_uri":"https://x"}"#))
        #expect(response.errorDescription == nil)
        #expect(!response.isPermanent)
    }

    @Test(arguments: ["invalid_grant", "invalid_client", "unauthorized_client", "unsupported_grant_type", "invalid_scope"])
    func permanentErrors(code: String) {
        #expect(parse(#"{"error":"\#(code)"}"#)?.isPermanent == true)
    }

    @Test(arguments: ["invalid_request", "server_error", "temporarily_unavailable", "slow_down", "INVALID_GRANT", "something_else"])
    func transientErrors(code: String) {
        #expect(parse(#"{"error":"\#(code)"}"#)?.isPermanent == false)
    }

    @Test(arguments: [
        "", "<html>502</html>", "[]", #"{"error":""}"#, #"{"error":5}"#, #"{"message":"bad"}"#, #"{"error":"bad\ncode"}"#,
        #"{"error":"é"}"#,
    ])
    func notAnErrorBody(body: String) {
        #expect(parse(body) == nil)
    }

    @Test func errorCodeLengthIsLimited() {
        #expect(parse(#"{"error":"\#(String(repeating: "e", count: 128))"}"#) != nil)
        #expect(parse(#"{"error":"\#(String(repeating: "e", count: 129))"}"#) == nil)
    }

    @Test func descriptionIsSanitisedAndTruncated() throws {
        let response = try #require(parse(#"{"error":"invalid_grant","error_description":"line1\nline2\u0007\u007f é"}"#))
        #expect(response.errorDescription == "line1line2 é")
        let long = try #require(parse(#"{"error":"x","error_description":"\#(String(repeating: "d", count: 500))"}"#))
        #expect(long.errorDescription == String(repeating: "d", count: 300))
    }
}

import Testing
import TokendCore
import TokendJSON

/// A compact JWS with the given header and payload JSON and a placeholder signature.
private func jwt(header: String = #"{"typ":"JWT","alg":"RS256"}"#, payload: String, signature: String = "c2lnbmF0dXJl") -> String {
    Base64URL.encode(Array(header.utf8)) + "." + Base64URL.encode(Array(payload.utf8)) + "." + signature
}

private let now = Timestamp(secondsSince1970: 1_541_200_000)
private let seedPayload = """
    {"applicationVersion":"1.2.7","sub":"1-FgW7/lhAajlonnWAr7g3yB7e","application":"hatappstaging",\
    "iss":"postman.hubat.net","exp":1543692303,"iat":1541100303,"jti":"1c73175cd846"}
    """

private func check(_ token: String) throws(HATClaimError) -> HATTokenClaims {
    try HATTokenClaims.check(token, address: "postman.hubat.net", application: "hatappstaging", now: now)
}

private func rejection(_ token: String) -> HATClaimError? {
    do {
        _ = try check(token)
        return nil
    } catch {
        return error
    }
}

struct HATTokenClaimsTests {
    @Test func theSeedsExampleTokenIsAccepted() throws {
        let claims = try check(jwt(payload: seedPayload))
        #expect(claims.algorithm == "RS256")
        #expect(claims.issuer == "postman.hubat.net")
        #expect(claims.application == "hatappstaging")
        #expect(claims.subject == "1-FgW7/lhAajlonnWAr7g3yB7e")
        #expect(claims.issuedAt == Timestamp(secondsSince1970: 1_541_100_303))
        #expect(claims.expiresAt == Timestamp(secondsSince1970: 1_543_692_303))
    }

    @Test(arguments: [
        (#"{"alg":"none"}"#, HATClaimError.unsigned),
        (#"{"alg":"None","typ":"JWT"}"#, HATClaimError.unsigned),
        (#"{"alg":"HS256"}"#, HATClaimError.symmetricAlgorithm("HS256")),
        (#"{"alg":"HS512"}"#, HATClaimError.symmetricAlgorithm("HS512")),
        (#"{"alg":"RS512"}"#, HATClaimError.unsupportedAlgorithm("RS512")),
        (#"{"alg":"PS256"}"#, HATClaimError.unsupportedAlgorithm("PS256")),
        (#"{"alg":"ES256"}"#, HATClaimError.unsupportedAlgorithm("ES256")),
        (#"{"alg":"rs256"}"#, HATClaimError.unsupportedAlgorithm("rs256")),
        (#"{"alg":"RS256 "}"#, HATClaimError.unsupportedAlgorithm("RS256 ")),
        (#"{"alg":256}"#, HATClaimError.unsupportedAlgorithm("a number")),
        (#"{"typ":"JWT"}"#, HATClaimError.missingAlgorithm),
        (#"{"alg":"RS256","crit":["exp"]}"#, HATClaimError.unsupportedHeader("crit")),
        (#"["RS256"]"#, HATClaimError.malformedHeader),
    ])
    func onlyRS256IsAccepted(header: String, expected: HATClaimError) {
        #expect(rejection(jwt(header: header, payload: seedPayload)) == expected)
    }

    @Test func anRS256TokenWithoutASignatureIsUnsigned() {
        #expect(rejection(jwt(payload: seedPayload, signature: "")) == .unsigned)
    }

    @Test func wrongIssuerIsRejected() {
        let token = jwt(payload: seedPayload.replacing("postman.hubat.net", with: "mallory.hubat.net"))
        #expect(rejection(token) == .wrongIssuer(expected: "postman.hubat.net", found: "mallory.hubat.net"))
        #expect(rejection(token)?.description.contains("mallory.hubat.net") == true)
    }

    @Test func wrongApplicationIsRejected() {
        let token = jwt(payload: seedPayload.replacing("hatappstaging", with: "otherapp"))
        #expect(rejection(token) == .wrongApplication(expected: "hatappstaging", found: "otherapp"))
    }

    @Test func expiredIsRejected() {
        let token = jwt(payload: seedPayload)
        #expect(throws: HATClaimError.expired(at: Timestamp(secondsSince1970: 1_543_692_303))) {
            try HATTokenClaims.check(
                token, address: "postman.hubat.net", application: "hatappstaging", now: Timestamp(secondsSince1970: 1_543_692_303))
        }
    }

    @Test(arguments: [
        (#"{"application":"hatappstaging","exp":1543692303,"iat":1541100303}"#, HATClaimError.missingClaim("iss")),
        (#"{"iss":"postman.hubat.net","exp":1543692303,"iat":1541100303}"#, HATClaimError.missingClaim("application")),
        (#"{"iss":"postman.hubat.net","application":"hatappstaging","iat":1541100303}"#, HATClaimError.missingClaim("exp")),
        (#"{"iss":"postman.hubat.net","application":"hatappstaging","exp":1543692303}"#, HATClaimError.missingClaim("iat")),
        (#"{"iss":"postman.hubat.net","application":"hatappstaging","exp":"soon","iat":1541100303}"#, HATClaimError.invalidClaim("exp")),
        (#"{"iss":"postman.hubat.net","application":"hatappstaging","exp":1543692303,"iat":-1}"#, HATClaimError.invalidClaim("iat")),
        (#"{"iss":"postman.hubat.net","application":"hatappstaging","exp":1541100303,"iat":1543692303}"#, HATClaimError.issuedAfterExpiry),
        (
            #"{"iss":["postman.hubat.net"],"application":"hatappstaging","exp":1543692303,"iat":1541100303}"#,
            HATClaimError.missingClaim("iss")
        ),
        (#"not json"#, HATClaimError.malformedPayload),
    ])
    func claimsAreRequired(payload: String, expected: HATClaimError) {
        #expect(rejection(jwt(payload: payload)) == expected)
    }

    @Test(arguments: ["", "abc", "a.b", "a.b.c.d", ".x.y", "x..y", "a b.c.d", "é.e.e"])
    func nonJWTsAreRejected(token: String) {
        #expect(rejection(token) == .notAJWT)
    }

    @Test func undecodableHeaderIsMalformed() {
        #expect(rejection("!!!." + Base64URL.encode(Array(seedPayload.utf8)) + ".c2ln") == .malformedHeader)
        #expect(rejection("e.e30.c2ln") == .malformedHeader)
    }

    @Test func overlongTokensAreRefusedUnread() {
        let token = jwt(payload: seedPayload) + String(repeating: "A", count: HATTokenClaims.maximumLength)
        #expect(rejection(token) == .notAJWT)
    }

    @Test func messagesNeverContainTheToken() {
        let tokens = [
            jwt(header: #"{"alg":"HS256"}"#, payload: seedPayload), jwt(payload: seedPayload.replacing("hatappstaging", with: "x")),
            jwt(payload: seedPayload.replacing("postman.hubat.net", with: "\u{1B}[31mevil")), jwt(payload: "{}"),
        ]
        for token in tokens {
            let message = rejection(token)?.description ?? ""
            #expect(!message.isEmpty)
            for part in token.split(separator: ".") { #expect(!message.contains(part)) }
            #expect(!message.unicodeScalars.contains { $0.value < 0x20 })
        }
    }

    @Test func untrustedValuesAreShortenedInMessages() {
        let long = String(repeating: "m", count: 500)
        let message = rejection(jwt(payload: seedPayload.replacing("hatappstaging", with: long)))?.description ?? ""
        #expect(message.count < 200)
    }
}

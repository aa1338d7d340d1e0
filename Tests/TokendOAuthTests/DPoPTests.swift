import Crypto
import Synchronization
import Testing
import TokendCore
import TokendJSON

@testable import TokendOAuth

/// DPoP (RFC 9449): the key's JWK and thumbprint, the proofs (checked against the RFC's
/// examples and verified with the public key), and the one retry with a server's nonce.
struct DPoPTests {
    struct Failure: Error {
        let description: String
        init(_ description: String) { self.description = description }
    }

    static let now = Timestamp(secondsSince1970: 1_795_600_000)

    static func decode(_ part: Substring) throws -> JSONObject {
        guard case .object(let object)? = try Base64URL.decode(part).map({ try JSONParser.parse($0) }) else {
            throw Failure("not a base64url JSON object")
        }
        return object
    }

    /// RFC 9449 §6.1: the example JWK's thumbprint is the example `jkt`.
    @Test func theThumbprintIsRFC7638sAsInTheRFCsExample() {
        #expect(
            DPoPKey.thumbprint(x: "l8tFrhx-34tV3hRICRDY9zCkDlpBhF42UQUfWVAWBFs", y: "9VE4jf_Ok_o64zbTTlcuNJajHmt6v9TDVrU0CdvGRDA")
                == "0ZcOCORZNYy-DWpqq30jZyJGHTN0d2HglBV3uiguA4I")
    }

    /// RFC 9449 §7.1: the example access token's `ath`.
    @Test func athIsTheHashOfTheAccessTokenAsInTheRFCsExample() {
        #expect(
            DPoPKey.accessTokenHash(SecretString("Kz~8mXK1EalYznwH-LC-1fBAo.4Ljp~zsPE_NeO.gxU"))
                == "fUHyO2r2Z3DZ53EsNrWBb0xWXoaNy59IiKCAqksmQEo")
    }

    @Test func aProofCarriesThePublicKeyAndTheRequestAndVerifies() throws {
        let key = DPoPKey()
        let target = try DPoPTarget(method: "GET", uri: "https://api.example/items?page=2#top")
        let proof = try key.proof(for: target, now: Self.now, nonce: "n-1", accessToken: SecretString("at-1"))
        let parts = proof.split(separator: ".", omittingEmptySubsequences: false)
        try #require(parts.count == 3)
        let header = try Self.decode(parts[0])
        #expect(header["typ"] == .string("dpop+jwt") && header["alg"] == .string("ES256"))
        guard case .object(let jwk)? = header["jwk"], case .string(let x)? = jwk["x"], case .string(let y)? = jwk["y"] else {
            Issue.record("no jwk in \(header)")
            return
        }
        #expect(jwk["kty"] == .string("EC") && jwk["crv"] == .string("P-256") && jwk["d"] == nil, "only the public key")
        #expect(DPoPKey.thumbprint(x: x, y: y) == key.thumbprint)
        let claims = try Self.decode(parts[1])
        #expect(claims["htm"] == .string("GET"))
        #expect(claims["htu"] == .string("https://api.example/items"), "without query and fragment")
        #expect(claims["iat"] == .int(1_795_600_000))
        #expect(claims["nonce"] == .string("n-1"))
        #expect(claims["ath"] == .string(DPoPKey.accessTokenHash(SecretString("at-1"))))
        // The signature verifies with the public key of the header (r ‖ s, RFC 7518 §3.4).
        let publicKey = try P256.Signing.PublicKey(rawRepresentation: try #require(Base64URL.decode(x)) + (Base64URL.decode(y) ?? []))
        let signature = try P256.Signing.ECDSASignature(rawRepresentation: try #require(Base64URL.decode(parts[2])))
        #expect(publicKey.isValidSignature(signature, for: Array("\(parts[0]).\(parts[1])".utf8)))
        #expect(!publicKey.isValidSignature(signature, for: Array("\(parts[0]).e30".utf8)), "and only for what was signed")
    }

    @Test func everyProofHasItsOwnJTIAndATokenRequestHasNoATH() throws {
        let key = DPoPKey()
        let target = try DPoPTarget(method: "POST", uri: "https://idp.example/token")
        let first = try Self.decode(try key.proof(for: target, now: Self.now).split(separator: ".")[1])
        let second = try Self.decode(try key.proof(for: target, now: Self.now).split(separator: ".")[1])
        #expect(first["jti"] != nil && first["jti"] != second["jti"])
        #expect(first["ath"] == nil && first["nonce"] == nil)
    }

    @Test func theKeyRoundTripsThroughItsSealedFormAndABrokenOneIsAProblemWithoutIt() throws {
        let key = DPoPKey()
        #expect(try DPoPKey(key.secret).thumbprint == key.thumbprint)
        #expect(key.secret.description == "<redacted>")
        let broken = SecretString("-----BEGIN PRIVATE KEY-----\nMIGHAgEAMBMGByqGSM49\n-----END PRIVATE KEY-----\n")
        #expect(throws: DPoPKey.Problem.self) { try DPoPKey(broken) }
        do {
            _ = try DPoPKey(broken)
        } catch {
            #expect(!error.description.contains("MIGH"))
        }
    }

    // MARK: Nonces

    struct Answer: DPoPAnswer {
        var status: Int
        var dpopNonce: String?
        var body: [UInt8]

        static func demand(_ nonce: String?) -> Answer {
            Answer(status: 400, dpopNonce: nonce, body: Array(#"{"error":"use_dpop_nonce"}"#.utf8))
        }
        static let ok = Answer(status: 200, dpopNonce: nil, body: Array(#"{"access_token":"a"}"#.utf8))
    }

    /// Sends through `nonces` with a key, answering in turn with `answers`; returns the nonces
    /// the proofs carried and the final answer's status.
    static func exchange(_ nonces: DPoPNonces, answers: [Answer], endpoint: String = "https://idp.example/token") async throws -> (
        sent: [String?], status: Int, retried: Bool
    ) {
        let sent = Mutex<[String?]>([])
        let answer = try await nonces.send(to: endpoint, key: DPoPKey(), now: { now }) { proof throws(Failure) in
            guard let proof, let claims = try? decode(proof.split(separator: ".")[1]) else { throw Failure("no proof") }
            let count = sent.withLock { sent in
                sent.append(claims["nonce"].flatMap { if case .string(let n) = $0 { n } else { nil } })
                return sent.count
            }
            guard count <= answers.count else { throw Failure("sent \(count) times") }
            return answers[count - 1]
        }
        return (sent.withLock { $0 }, answer.answer.status, answer.retried)
    }

    @Test func aDemandedNonceIsSentOnceMoreAndRememberedForTheNextRequest() async throws {
        let nonces = DPoPNonces()
        let first = try await Self.exchange(nonces, answers: [.demand("n-1"), .ok])
        #expect(first.sent == [nil, "n-1"] && first.status == 200 && first.retried)
        let next = try await Self.exchange(nonces, answers: [.ok])
        #expect(next.sent == ["n-1"], "the next proof carries the nonce at once")
    }

    @Test func aSecondDemandIsReturnedNotRetried() async throws {
        let twice = try await Self.exchange(DPoPNonces(), answers: [.demand("n-1"), .demand("n-2"), .ok])
        #expect(twice.sent == [nil, "n-1"] && twice.status == 400 && twice.retried)
        #expect(Answer.demand("n-2").demandsDPoPNonce)
    }

    @Test(arguments: [nil, "", "bad nonce", "quo\"te", String(repeating: "n", count: 513)])
    func aDemandWithoutAUsableNonceIsNotRetried(header: String?) async throws {
        let result = try await Self.exchange(DPoPNonces(), answers: [.demand(header), .ok])
        #expect(result.sent == [nil] && result.status == 400 && !result.retried)
    }

    @Test func withoutAKeyNothingIsAdded() async throws {
        let sends = Mutex(0)
        let answer = try await DPoPNonces().send(to: "https://idp.example/token", key: nil, now: { Self.now }) {
            proof throws(Failure) in
            #expect(proof == nil)
            sends.withLock { $0 += 1 }
            return Answer.demand("n-1")
        }
        #expect(answer.answer.status == 400 && !answer.retried && sends.withLock { $0 } == 1)
    }
}

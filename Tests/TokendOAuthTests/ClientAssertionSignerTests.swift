import Crypto
import Testing
import TokendConfig
import TokendCore
import TokendJSON
import TokendTestSupport
import _CryptoExtras

@testable import TokendOAuth

/// `private_key_jwt` assertions (RFC 7523): verified with the public key, claims as the RFC
/// and OpenID Connect Core §9 want them, and keys tokend must refuse.
struct ClientAssertionSignerTests {
    static let now = Timestamp(secondsSince1970: 1_700_000_000)

    static func key(_ pem: String, kid: String? = "k1") -> ClientAssertionKey {
        ClientAssertionKey(pem: SecretString(pem), source: "/etc/tokend/client.key", keyID: kid)
    }

    /// Header, claims and signing input of a compact JWS.
    static func split(_ jwt: String) throws -> (header: JSONObject, claims: JSONObject, input: [UInt8], signature: [UInt8]) {
        let parts = jwt.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        try #require(parts.count == 3)
        let decoded = try parts.map { try #require(Base64URL.decode($0)) }
        let header = try #require(try JSONParser.parse(decoded[0]).objectValue)
        let claims = try #require(try JSONParser.parse(decoded[1]).objectValue)
        return (header, claims, Array((parts[0] + "." + parts[1]).utf8), decoded[2])
    }

    @Test func es256VerifiesWithThePublicKey() throws {
        let privateKey = P256.Signing.PrivateKey()
        let signer = try ClientAssertionSigner(Self.key(privateKey.pemRepresentation))
        #expect(signer.algorithm == "ES256")
        let jwt = try signer.assertion(clientID: "tokend", audience: "https://idp.example/token", now: Self.now)
        let (header, claims, input, signature) = try Self.split(jwt)
        #expect(header["alg"] == .string("ES256") && header["typ"] == .string("JWT") && header["kid"] == .string("k1"))
        #expect(claims["iss"] == .string("tokend") && claims["sub"] == .string("tokend"))
        #expect(claims["aud"] == .string("https://idp.example/token"))
        #expect(claims["iat"] == .int(1_700_000_000) && claims["exp"] == .int(1_700_000_060))
        let raw = try P256.Signing.ECDSASignature(rawRepresentation: signature)
        #expect(privateKey.publicKey.isValidSignature(raw, for: input))
    }

    @Test func rs256VerifiesWithThePublicKey() throws {
        let privateKey = try _RSA.Signing.PrivateKey(keySize: .bits2048)
        let signer = try ClientAssertionSigner(Self.key(privateKey.pemRepresentation, kid: nil))
        #expect(signer.algorithm == "RS256")
        let jwt = try signer.assertion(clientID: "tokend", audience: "https://idp.example/", now: Self.now)
        let (header, _, input, signature) = try Self.split(jwt)
        #expect(header["alg"] == .string("RS256") && header["kid"] == nil)
        #expect(
            privateKey.publicKey.isValidSignature(
                _RSA.Signing.RSASignature(rawRepresentation: signature), for: SHA256.hash(data: input), padding: .insecurePKCS1v1_5))
    }

    @Test func everyAssertionHasItsOwnJTI() throws {
        let signer = try ClientAssertionSigner(Self.key(P256.Signing.PrivateKey().pemRepresentation))
        var seen: Set<String> = []
        for _ in 0..<50 {
            let (_, claims, _, _) = try Self.split(try signer.assertion(clientID: "c", audience: "a", now: Self.now))
            guard case .string(let jti)? = claims["jti"] else {
                Issue.record("no jti")
                return
            }
            #expect(jti.count >= 32 && seen.insert(jti).inserted)
        }
    }

    /// Keys tokend cannot or must not sign with: each refused with one line naming the file
    /// and never quoting the key.
    @Test(arguments: [
        ("genrsa 1024", "holds an RSA key of fewer than 2048 bits"),
        ("ecparam -name secp384r1 -genkey -noout", "holds no P-256 or RSA private key"),
        ("genpkey -algorithm ed25519", "holds no P-256 or RSA private key"),
    ])
    func unusableKeysAreRefused(command: String, problem: String) async throws {
        let generated = try await ChildProcess.run(
            "/usr/bin/openssl", command.split(separator: " ").map(String.init), timeout: .seconds(30))
        try #require(generated.status == 0, "\(generated.stderr)")
        #expect(throws: ClientAssertionSigner.KeyProblem.self) { try ClientAssertionSigner(Self.key(generated.stdout)) }
        do {
            _ = try ClientAssertionSigner(Self.key(generated.stdout))
        } catch {
            #expect(error.description.hasPrefix("/etc/tokend/client.key \(problem)"), "\(error)")
            let body = generated.stdout.split(separator: "\n").filter { !$0.hasPrefix("-----") }
            for line in body { #expect(!error.description.contains(line)) }
        }
    }

    @Test func theAudienceFollowsTheConfiguration() {
        var settings = OAuth2Settings(tokenEndpoint: "https://idp.example/token", issuer: "https://idp.example", clientID: "c")
        settings.clientAssertionKey = Self.key("")
        #expect(settings.clientAssertionAudience(endpoint: "https://idp.example/revoke") == "https://idp.example/revoke")
        settings.clientAssertionKey?.audience = .tokenEndpoint
        #expect(settings.clientAssertionAudience(endpoint: "https://idp.example/revoke") == "https://idp.example/token")
        settings.clientAssertionKey?.audience = .issuer
        #expect(settings.clientAssertionAudience(endpoint: "https://idp.example/revoke") == "https://idp.example")
        settings.clientAssertionKey?.audience = .url("https://aud.example")
        #expect(settings.clientAssertionAudience(endpoint: "https://idp.example/revoke") == "https://aud.example")
    }

    @Test func theFormCarriesTheAssertionAndNoSecret() throws {
        var settings = OAuth2Settings(clientID: "tokend", clientAuthentication: .privateKeyJWT)
        settings.clientAssertionKey = Self.key(P256.Signing.PrivateKey().pemRepresentation)
        var fields: [(String, String)] = [("grant_type", "refresh_token")]
        let header = try TokenEndpointClient.authenticate(
            fields: &fields, settings: settings, endpoint: "https://idp.example/token", now: Self.now)
        #expect(header == nil)
        #expect(fields.map(\.0) == ["grant_type", "client_id", "client_assertion_type", "client_assertion"])
        #expect(fields[2].1 == "urn:ietf:params:oauth:client-assertion-type:jwt-bearer")
    }
}

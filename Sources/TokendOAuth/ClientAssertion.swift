import Crypto
import TokendConfig
import TokendCore
import TokendJSON
import _CryptoExtras

/// Signs the client assertions of `client_auth = "private_key_jwt"` (RFC 7523 §2.2, as OpenID
/// Connect Core §9 uses it): ES256 with a P-256 key, RS256 with an RSA key of 2048 bits or more.
/// The private key stays in this value; only signatures leave.
public struct ClientAssertionSigner: Sendable {
    enum Key: Sendable {
        case es256(P256.Signing.PrivateKey)
        case rs256(_RSA.Signing.PrivateKey)
    }

    /// Why a key cannot sign: one line naming the file, never its content.
    public struct KeyProblem: Error, CustomStringConvertible {
        public let description: String
    }

    let key: Key
    let keyID: String?

    /// The JWS `alg` the key signs with.
    public var algorithm: String {
        switch key {
        case .es256: "ES256"
        case .rs256: "RS256"
        }
    }

    /// Parses the configured key.
    /// - Throws: ``KeyProblem``: not a private key, another curve, an RSA key under 2048 bits.
    public init(_ configured: ClientAssertionKey) throws(KeyProblem) {
        keyID = configured.keyID
        let pem = configured.pem.value
        if let ec = try? P256.Signing.PrivateKey(pemRepresentation: pem) {
            key = .es256(ec)
            return
        }
        do {
            key = .rs256(try _RSA.Signing.PrivateKey(pemRepresentation: pem))
        } catch CryptoKitError.incorrectParameterSize {
            throw KeyProblem(description: "\(configured.source) holds an RSA key of fewer than 2048 bits, too weak to sign with")
        } catch {
            throw KeyProblem(description: "\(configured.source) holds no P-256 or RSA private key (PEM, PKCS #8, SEC 1 or PKCS #1)")
        }
    }

    /// A client assertion for `clientID` to send to a server known as `audience`: `iss` and
    /// `sub` are the client, `exp` is a minute after `iat`, and `jti` is new every time, so a
    /// server that remembers them refuses a replay.
    public func assertion(clientID: String, audience: String, now: Timestamp) throws(KeyProblem) -> String {
        var header = JSONObject()
        header["alg"] = .string(algorithm)
        header["typ"] = .string("JWT")
        if let keyID { header["kid"] = .string(keyID) }
        let issuedAt = now.millisecondsSince1970 / 1000
        var claims = JSONObject()
        claims["iss"] = .string(clientID)
        claims["sub"] = .string(clientID)
        claims["aud"] = .string(audience)
        claims["jti"] = .string(PKCE.randomToken())
        claims["iat"] = .int(issuedAt)
        claims["exp"] = .int(issuedAt + Self.lifetimeSeconds)
        let signingInput = Base64URL.encode(Self.json(header)) + "." + Base64URL.encode(Self.json(claims))
        return signingInput + "." + Base64URL.encode(try signature(of: Array(signingInput.utf8)))
    }

    /// How long an assertion is valid: it is used at once, and a short life limits a replay.
    static let lifetimeSeconds: Int64 = 60

    func signature(of input: [UInt8]) throws(KeyProblem) -> [UInt8] {
        do {
            switch key {
            case .es256(let key):
                // JWS wants r ‖ s (RFC 7518 §3.4), which is the raw representation.
                return Array(try key.signature(for: input).rawRepresentation)
            case .rs256(let key):
                return Array(try key.signature(for: SHA256.hash(data: input), padding: .insecurePKCS1v1_5).rawRepresentation)
            }
        } catch {
            throw KeyProblem(description: "signing the client assertion failed")
        }
    }

    private static func json(_ object: JSONObject) -> [UInt8] {
        var bytes: [UInt8] = []
        JSONWriter.write(.object(object), into: &bytes)
        return bytes
    }
}

extension OAuth2Settings {
    /// The `aud` of this client's assertion on a request to `endpoint`.
    func clientAssertionAudience(endpoint: String) -> String {
        switch clientAssertionKey?.audience ?? .endpoint {
        case .endpoint: return endpoint
        case .tokenEndpoint: return tokenEndpoint ?? endpoint
        case .issuer: return issuer ?? tokenEndpoint ?? endpoint
        case .url(let url): return url
        }
    }
}

/// What the configuration parser cannot check without the crypto libraries: that every
/// `private_key_jwt` key is one tokend can sign with, and every TLS client certificate one it
/// can present with its key. Run wherever a configuration is loaded (start, reload,
/// `--check-config`), so a bad key is a configuration error naming its key.
public enum ClientKeyCheck {
    public static func check(_ configuration: DaemonConfiguration) throws(ConfigurationError) {
        for (name, provider) in configuration.providers.sorted(by: { $0.key < $1.key }) {
            guard case .oauth2(let settings) = provider.kind else { continue }
            if let key = settings.clientAssertionKey {
                do {
                    _ = try ClientAssertionSigner(key)
                } catch {
                    throw ConfigurationError(
                        file: configuration.sourceFile ?? "", key: "providers.\(name).\(key.configurationKey)", problem: error.description)
                }
            }
            if let identity = settings.tlsClientIdentity {
                do {
                    try identity.check()
                } catch {
                    throw ConfigurationError(
                        file: configuration.sourceFile ?? "", key: "providers.\(name).\(identity.keyConfigurationKey)",
                        problem: error.description)
                }
            }
        }
    }
}

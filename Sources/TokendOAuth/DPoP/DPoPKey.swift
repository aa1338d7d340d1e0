import Crypto
import TokendCore
import TokendJSON

/// The proof-of-possession key of one DPoP-bound credential (RFC 9449): a P-256 key that
/// tokend generates when the credential is enrolled, keeps sealed in the store beside its
/// tokens, and never lets out. Only its public half (in each proof's header) and its
/// signatures leave tokend.
public struct DPoPKey: Sendable {
    let privateKey: P256.Signing.PrivateKey
    /// The base64url JOSE header every proof of this key carries (`typ`, `alg`, `jwk`): the
    /// same for each proof, so made once (deriving and encoding the public key each time was
    /// most of a proof's cost besides the signature).
    let encodedProofHeader: String

    /// Why a stored key cannot be used: one line, never the key.
    public struct Problem: Error, CustomStringConvertible {
        public let description: String
    }

    /// A new key, from the system's random source.
    public init() { self.init(privateKey: P256.Signing.PrivateKey()) }

    private init(privateKey: P256.Signing.PrivateKey) {
        self.privateKey = privateKey
        let raw = Array(privateKey.publicKey.rawRepresentation)
        encodedProofHeader = Self.proofHeader(x: Base64URL.encode(raw[0..<32]), y: Base64URL.encode(raw[32..<64]))
    }

    /// The key stored as ``secret``.
    /// - Throws: ``Problem`` when the text is not a P-256 private key.
    public init(_ secret: SecretString) throws(Problem) {
        let key: P256.Signing.PrivateKey
        do {
            key = try P256.Signing.PrivateKey(pemRepresentation: secret.value)
        } catch {
            throw Problem(description: "the credential's DPoP key is not a P-256 private key")
        }
        self.init(privateKey: key)
    }

    /// The private key as PEM (PKCS #8), for the store, which seals it like a token.
    public var secret: SecretString { SecretString(privateKey.pemRepresentation) }

    /// The public key as a JWK (RFC 7517), the `jwk` header of every proof.
    public var publicJWK: JSONObject {
        let (x, y) = coordinates
        return ["kty": .string("EC"), "crv": .string("P-256"), "x": .string(x), "y": .string(y)]
    }

    /// The JWK SHA-256 thumbprint (RFC 7638) of the public key: the `jkt` a provider puts in the
    /// `cnf` claim of the tokens it binds to this key.
    public var thumbprint: String {
        let (x, y) = coordinates
        return Self.thumbprint(x: x, y: y)
    }

    /// RFC 7638 §3: the required members in lexicographic order, no whitespace.
    static func thumbprint(x: String, y: String) -> String {
        let canonical = #"{"crv":"P-256","kty":"EC","x":"\#(x)","y":"\#(y)"}"#
        return Base64URL.encode(SHA256.hash(data: Array(canonical.utf8)))
    }

    /// The base64url x and y coordinates of the public key.
    private var coordinates: (x: String, y: String) {
        // The raw representation is x ‖ y, 32 bytes each.
        let raw = Array(privateKey.publicKey.rawRepresentation)
        return (Base64URL.encode(raw[0..<32]), Base64URL.encode(raw[32..<64]))
    }
}

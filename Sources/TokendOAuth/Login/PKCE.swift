import Crypto
import TokendCore
import TokendJSON

/// Proof Key for Code Exchange (RFC 7636) and the other random values of a login.
public enum PKCE {
    /// A code verifier: 32 random bytes, base64url-encoded (43 characters, §4.1).
    public static func makeVerifier() -> SecretString { SecretString(randomToken()) }

    /// The S256 challenge of `verifier` (§4.2): BASE64URL(SHA256(verifier)).
    public static func challenge(for verifier: SecretString) -> String {
        Base64URL.encode(SHA256.hash(data: Array(verifier.value.utf8)))
    }

    /// 32 bytes from the system's cryptographic random source, base64url-encoded: for state,
    /// nonce and login ids, which an attacker must not guess.
    public static func randomToken() -> String {
        var generator = SystemRandomNumberGenerator()
        return Base64URL.encode((0..<32).map { _ in UInt8.random(in: .min ... .max, using: &generator) })
    }
}

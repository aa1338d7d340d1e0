import Crypto
import TokendCore
import TokendJSON

extension DPoPKey {
    /// A DPoP proof (RFC 9449 §4.2) for one HTTP request: a JWT of type `dpop+jwt`, signed
    /// ES256 with this key, whose header carries the public key.
    ///
    /// - Parameters:
    ///   - target: the request's method and URI (``DPoPTarget`` has dropped query and fragment).
    ///   - nonce: the server's latest `DPoP-Nonce`, when it demands one.
    ///   - accessToken: the token the request presents; its hash becomes `ath` (§4.2), which
    ///     resource servers require. Absent for requests to the token endpoint.
    /// - Returns: the compact JWS, for the `DPoP` header.
    /// - Throws: ``Problem`` if the crypto library cannot sign (it does so only for a broken key).
    public func proof(
        for target: DPoPTarget, now: Timestamp, nonce: String? = nil, accessToken: SecretString? = nil
    ) throws(Problem) -> String {
        var claims = JSONObject()
        // 128 random bits, so a server that remembers jti values never sees one twice.
        claims["jti"] = .string(Self.newJTI())
        claims["htm"] = .string(target.method)
        claims["htu"] = .string(target.uri)
        claims["iat"] = .int(now.millisecondsSince1970 / 1000)
        if let nonce { claims["nonce"] = .string(nonce) }
        if let accessToken { claims["ath"] = .string(Self.accessTokenHash(accessToken)) }
        let signingInput = encodedProofHeader + "." + Base64URL.encode(Self.json(claims))
        let signature: P256.Signing.ECDSASignature
        do {
            signature = try privateKey.signature(for: Array(signingInput.utf8))
        } catch {
            throw Problem(description: "signing the DPoP proof failed")
        }
        // JWS wants r ‖ s (RFC 7518 §3.4), which is the raw representation.
        return signingInput + "." + Base64URL.encode(signature.rawRepresentation)
    }

    /// The proof header of the key with public coordinates `x` and `y` (base64url), encoded.
    static func proofHeader(x: String, y: String) -> String {
        let jwk: JSONObject = ["kty": .string("EC"), "crv": .string("P-256"), "x": .string(x), "y": .string(y)]
        let header: JSONObject = ["typ": .string("dpop+jwt"), "alg": .string("ES256"), "jwk": .object(jwk)]
        return Base64URL.encode(json(header))
    }

    /// A new `jti`: 128 bits from the system's random source, base64url.
    static func newJTI() -> String {
        var generator = SystemRandomNumberGenerator()
        let (high, low) = (generator.next(), generator.next())
        return Base64URL.encode(withUnsafeBytes(of: (high, low)) { Array($0) })
    }

    /// `ath`: the base64url SHA-256 of the access token's ASCII bytes (RFC 9449 §4.2).
    static func accessTokenHash(_ token: SecretString) -> String {
        Base64URL.encode(SHA256.hash(data: Array(token.value.utf8)))
    }

    private static func json(_ object: JSONObject) -> [UInt8] {
        var bytes: [UInt8] = []
        JSONWriter.write(.object(object), into: &bytes)
        return bytes
    }
}

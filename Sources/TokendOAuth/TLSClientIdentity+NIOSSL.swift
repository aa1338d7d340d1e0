import Crypto
import NIOSSL
import TokendConfig
import _CryptoExtras

extension TLSClientIdentity {
    /// Why an identity cannot be presented: one line naming the files, never their content.
    public struct Problem: Error, CustomStringConvertible {
        public let description: String
    }

    /// Puts the certificate chain and the key into `configuration`.
    func apply(to configuration: inout TLSConfiguration) throws(Problem) {
        let chain: [NIOSSLCertificate]
        do {
            chain = try NIOSSLCertificate.fromPEMBytes(Array(certificatePEM.utf8))
        } catch {
            throw Problem(description: "\(certificateSource) holds no usable PEM certificate")
        }
        guard !chain.isEmpty else { throw Problem(description: "\(certificateSource) holds no certificate") }
        let key: NIOSSLPrivateKey
        do {
            key = try NIOSSLPrivateKey(bytes: Array(keyPEM.value.utf8), format: .pem)
        } catch {
            throw Problem(description: "\(keySource) holds no usable PEM private key")
        }
        configuration.certificateChain = chain.map { .certificate($0) }
        configuration.privateKey = .privateKey(key)
    }

    /// Whether the files make an identity tokend can present: the certificate parses, the key is
    /// a P-256, P-384 or RSA (2048 bits or more) key, and it is the certificate's key.
    public func check() throws(Problem) {
        var configuration = TLSConfiguration.makeClientConfiguration()
        try apply(to: &configuration)
        guard let certificate = try? NIOSSLCertificate.fromPEMBytes(Array(certificatePEM.utf8)).first,
            let certificateKey = try? certificate.extractPublicKey().toSPKIBytes()
        else {
            throw Problem(description: "\(certificateSource) holds no certificate with a public key tokend can read")
        }
        guard let ownKey = Self.publicKeySPKI(ofPrivateKeyPEM: keyPEM.value) else {
            throw Problem(description: "\(keySource) holds no P-256, P-384 or RSA (2048 bits or more) private key")
        }
        guard ownKey == certificateKey else {
            throw Problem(description: "the key in \(keySource) does not belong to the certificate in \(certificateSource)")
        }
    }

    /// The SubjectPublicKeyInfo of a private key's public half.
    static func publicKeySPKI(ofPrivateKeyPEM pem: String) -> [UInt8]? {
        if let key = try? P256.Signing.PrivateKey(pemRepresentation: pem) { return Array(key.publicKey.derRepresentation) }
        if let key = try? P384.Signing.PrivateKey(pemRepresentation: pem) { return Array(key.publicKey.derRepresentation) }
        if let key = try? _RSA.Signing.PrivateKey(pemRepresentation: pem) { return Array(key.publicKey.derRepresentation) }
        return nil
    }
}

import Foundation
import Testing
import TokendConfig
import TokendCore
import TokendTestSupport

@testable import TokendOAuth

/// The checks a mutual-TLS identity passes when the configuration is loaded.
struct TLSClientIdentityTests {
    /// A self-signed certificate and its key, made by openssl.
    static func pair(_ algorithm: [String]) async throws -> (certificate: String, key: String) {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("tokend-tls-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let made = try await ChildProcess.run(
            "/usr/bin/openssl",
            [
                "req", "-x509", "-nodes", "-days", "1", "-subj", "/CN=tokend-test", "-keyout", directory + "/k.pem", "-out",
                directory + "/c.pem",
            ]
                + algorithm, timeout: .seconds(60))
        try #require(made.status == 0, "\(made.stderr)")
        let certificate = try String(contentsOfFile: directory + "/c.pem", encoding: .utf8)
        let key = try String(contentsOfFile: directory + "/k.pem", encoding: .utf8)
        return (certificate, key)
    }

    static func identity(_ certificate: String, _ key: String) -> TLSClientIdentity {
        TLSClientIdentity(certificatePEM: certificate, keyPEM: SecretString(key), certificateSource: "/etc/c.pem", keySource: "/etc/k.pem")
    }

    @Test(arguments: [["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"], ["-newkey", "rsa:2048"]])
    func aMatchingPairPasses(algorithm: [String]) async throws {
        let (certificate, key) = try await Self.pair(algorithm)
        try Self.identity(certificate, key).check()
    }

    @Test func aKeyOfAnotherCertificateIsRefused() async throws {
        let (certificate, _) = try await Self.pair(["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"])
        let (_, otherKey) = try await Self.pair(["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"])
        #expect(throws: TLSClientIdentity.Problem.self) { try Self.identity(certificate, otherKey).check() }
        do {
            try Self.identity(certificate, otherKey).check()
        } catch {
            #expect(error.description == "the key in /etc/k.pem does not belong to the certificate in /etc/c.pem")
            for line in otherKey.split(separator: "\n") where !line.hasPrefix("-----") { #expect(!error.description.contains(line)) }
        }
    }

    @Test func aCertificateThatIsNotOneIsRefused() async throws {
        let (_, key) = try await Self.pair(["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"])
        let broken = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"
        #expect(throws: TLSClientIdentity.Problem.self) { try Self.identity(broken, key).check() }
    }
}

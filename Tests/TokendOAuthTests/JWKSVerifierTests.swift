import Crypto
import Foundation
import Testing
import TokendCore
import TokendJSON
import TokendOAuth
import TokendTestSupport

/// The JWKS verifier against a real HTTP server (python's http.server on 127.0.0.1) serving a
/// key set the test rewrites, with tokens signed by keys the test generates.
@Suite(.serialized)
struct JWKSVerifierTests {
    final class KeyServer {
        let directory: String
        let process = Process()
        var port = 0

        init() throws {
            directory = NSTemporaryDirectory() + "jwks-test-" + UUID().uuidString
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        }

        func serve(_ keys: [(kid: String, key: P256.Signing.PrivateKey)]) throws {
            let jwks: JSONValue = .object([
                "keys": .array(
                    keys.map { entry in
                        let raw = Array(entry.key.publicKey.x963Representation)  // 0x04 || x || y
                        return .object([
                            "kty": .string("EC"), "crv": .string("P-256"), "kid": .string(entry.kid), "alg": .string("ES256"),
                            "use": .string("sig"),
                            "x": .string(Base64URL.encode(raw[1...32])), "y": .string(Base64URL.encode(raw[33...64])),
                        ])
                    })
            ])
            try JSONWriter.string(jwks).write(toFile: directory + "/jwks.json", atomically: true, encoding: .utf8)
        }

        func start() async throws {
            process.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
            process.arguments = ["-u", "-m", "http.server", "0", "--bind", "127.0.0.1", "--directory", directory]
            let output = Pipe()
            process.standardOutput = output
            process.standardError = FileHandle.nullDevice
            try process.run()
            let reading = output.fileHandleForReading
            let line = try await onOwnThread { () throws -> String in
                var buffer = Data()
                while !String(decoding: buffer, as: UTF8.self).contains(") ...") {
                    let chunk = reading.availableData
                    if chunk.isEmpty { throw JWKSTestFailure() }
                    buffer.append(chunk)
                }
                return String(decoding: buffer, as: UTF8.self)
            }
            // "Serving HTTP on 127.0.0.1 port 41234 (http://127.0.0.1:41234/) ..."
            port = Int(line.split(separator: " ").drop { $0 != "port" }.dropFirst().first ?? "") ?? 0
        }

        var uri: String { "http://127.0.0.1:\(port)/jwks.json" }

        func stop() {
            // SIGKILL: the test process may ignore SIGTERM, and children inherit that.
            if process.isRunning { kill(process.processIdentifier, SIGKILL) }
            process.waitUntilExit()
            try? FileManager.default.removeItem(atPath: directory)
        }
    }

    struct JWKSTestFailure: Error {}

    static let expectations = JWTExpectations(issuer: "https://idp.example", audience: "client", what: "ID token")

    static func token(kid: String, key: P256.Signing.PrivateKey, iss: String = "https://idp.example") throws -> String {
        func part(_ object: JSONObject) -> String { Base64URL.encode(Array(JSONWriter.string(.object(object)).utf8)) }
        let now = Int64(Date().timeIntervalSince1970)
        let input =
            part(["alg": .string("ES256"), "kid": .string(kid), "typ": .string("JWT")]) + "."
            + part(["iss": .string(iss), "aud": .string("client"), "exp": .int(now + 600), "iat": .int(now)])
        let signature = try key.signature(for: Array(input.utf8))
        return input + "." + Base64URL.encode(signature.rawRepresentation)
    }

    var now: Timestamp { Timestamp(millisecondsSince1970: Int64(Date().timeIntervalSince1970 * 1000)) }

    @Test func verifiesAndRefetchesOnAnUnknownKeyAtMostOncePerInterval() async throws {
        let server = try KeyServer()
        defer { server.stop() }
        let k1 = P256.Signing.PrivateKey()
        let k2 = P256.Signing.PrivateKey()
        try server.serve([("k1", k1)])
        try await server.start()
        let pool = HTTPClientPool()
        let verifier = JWKSVerifier(jwksURI: server.uri, caFile: nil, pool: pool, minimumRefetchInterval: .seconds(60))

        let claims = try await verifier.verify(try Self.token(kid: "k1", key: k1), expectations: Self.expectations, now: now)
        #expect(claims["aud"]?.stringValue == "client")
        #expect(await verifier.fetchCount == 1)

        // An unknown kid: one re-fetch, then refused.
        let rotated = try Self.token(kid: "k2", key: k2)
        await #expect(throws: LoginError.self) { _ = try await verifier.verify(rotated, expectations: Self.expectations, now: now) }
        #expect(await verifier.fetchCount == 2)
        // The issuer now has k2, but another re-fetch inside the interval is not allowed.
        try server.serve([("k1", k1), ("k2", k2)])
        await #expect(throws: LoginError.self) { _ = try await verifier.verify(rotated, expectations: Self.expectations, now: now) }
        #expect(await verifier.fetchCount == 2)

        // Without the rate limit's wait, the re-fetch finds the rotated key.
        let eager = JWKSVerifier(jwksURI: server.uri, caFile: nil, pool: pool, minimumRefetchInterval: .zero)
        try server.serve([("k1", k1)])
        _ = try await eager.verify(try Self.token(kid: "k1", key: k1), expectations: Self.expectations, now: now)
        try server.serve([("k1", k1), ("k2", k2)])
        _ = try await eager.verify(rotated, expectations: Self.expectations, now: now)
        #expect(await eager.fetchCount == 2)
        await pool.shutdown()
    }

    @Test func badSignaturesAndClaimsAreRefused() async throws {
        let server = try KeyServer()
        defer { server.stop() }
        let k1 = P256.Signing.PrivateKey()
        let other = P256.Signing.PrivateKey()
        try server.serve([("k1", k1)])
        try await server.start()
        let pool = HTTPClientPool()
        let verifier = JWKSVerifier(jwksURI: server.uri, caFile: nil, pool: pool)
        // Signed by a key that merely claims to be k1.
        await #expect(throws: LoginError("the ID token's signature does not verify against the issuer's keys")) {
            _ = try await verifier.verify(try Self.token(kid: "k1", key: other), expectations: Self.expectations, now: now)
        }
        await #expect(throws: LoginError.self) {
            _ = try await verifier.verify(
                try Self.token(kid: "k1", key: k1, iss: "https://evil.example"), expectations: Self.expectations, now: now)
        }
        await pool.shutdown()
    }
}

import Foundation
import Logging
import Testing
import TokendCore
import TokendPostgres
import TokendStorage
import TokendTestSupport

#if canImport(Glibc)
    import Glibc
#endif

/// `[store] tls = "verify-full"` against a real PostgreSQL 15 with a server certificate made by
/// openssl for the test: the store connects only over TLS to a server whose certificate chains
/// to the configured CA and names the URL's host.
@Suite(.serialized, .enabled(if: PostgresServer.isAvailable, "needs PostgreSQL 15 (scripts/setup-host.sh) and root"))
struct PostgresTLSTests {
    static func open(_ server: PostgresServer, tls: PostgresTLSMode) async throws -> PostgresCredentialStore {
        var settings = Fixture.settings(server, node: "tls")
        settings.tls = tls
        return try await PostgresCredentialStore.open(settings: settings, keyring: Fixture.keyring, logger: Logger(label: "test.tls"))
    }

    @Test func verifyFullConnectsToTheServerItsCAVouchesFor() async throws {
        try await withServer { server in
            let ca = try await server.enableTLS()
            let store = try await Self.open(server, tls: .verifyFull(caFile: ca))
            _ = try await store.insert(Fixture.credential("alice"), replacing: false)
            #expect(try await store.load(userIdentifier: "alice") != nil)
            // The server saw an encrypted connection.
            let encrypted = try await server.psql(
                "SELECT bool_and(s.ssl) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) WHERE a.application_name = 'tokend tls'")
            #expect(encrypted == "t")
            try await store.close()
        }
    }

    /// Something answers in the server's place with a certificate of its own (here: from a CA
    /// the store was not given): refused.
    @Test func verifyFullRefusesACertificateFromAnotherCA() async throws {
        try await withServer { server in
            _ = try await server.enableTLS()
            let other = server.directory + "/other-ca.crt"
            let result = try await ChildProcess.run(
                "/usr/bin/openssl",
                [
                    "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", "other-ca.key",
                    "-out", other, "-days", "2", "-subj", "/CN=another CA",
                ], directory: server.directory, timeout: .seconds(60))
            #expect(result.status == 0)
            let error = await #expect(throws: StorageError.self) { try await Self.open(server, tls: .verifyFull(caFile: other)) }
            // Start-up names the refusal (its one connection reports it; the pool would retry until the timeout).
            #expect(error?.message.contains("CERTIFICATE_VERIFY_FAILED") == true, "\(String(describing: error))")
        }
    }

    @Test func verifyFullRefusesACertificateForAnotherHost() async throws {
        try await withServer { server in
            let ca = try await server.enableTLS(subjectAltName: "DNS:db.example.org")
            let error = await #expect(throws: StorageError.self) { try await Self.open(server, tls: .verifyFull(caFile: ca)) }
            #expect(error?.message.contains("failedToValidateHostname") == true, "\(String(describing: error))")
        }
    }

    /// The downgrade: something on the path answers that it has no TLS. `prefer` carries on in
    /// plaintext (password exchange and every row readable and changeable on the path);
    /// `verify-full` refuses.
    @Test func verifyFullRefusesAServerWithoutTLS() async throws {
        try await withServer { server in
            let ca = try await server.enableTLS()
            try await server.stop()
            server.serverOptions = []
            try await server.start()
            let error = await #expect(throws: StorageError.self) { try await Self.open(server, tls: .verifyFull(caFile: ca)) }
            #expect(error?.message.contains("the server does not offer TLS") == true, "\(String(describing: error))")
            let preferring = try await Self.open(server, tls: .prefer)
            let encrypted = try await server.psql(
                "SELECT bool_or(s.ssl) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) WHERE a.application_name = 'tokend tls'")
            #expect(encrypted == "f", "prefer fell back to plaintext")
            try await preferring.close()
        }
    }

    @Test func anUnreadableCAFileIsNamed() async throws {
        try await withServer { server in
            let error = await #expect(throws: StorageError.self) {
                try await Self.open(server, tls: .verifyFull(caFile: "/nonexistent/ca.pem"))
            }
            #expect(error?.message.contains("/nonexistent/ca.pem") == true)
        }
    }
}

import Logging
import TokendCore
import TokendPostgres
import TokendStorage
import TokendTestSupport

enum Fixture {
    static let keyring = Keyring(current: MasterKey.generate())

    static func credential(
        _ user: String, access: String = "access-\(Int.random(in: 0..<1_000_000))", refresh: String? = "refresh-token-value"
    )
        -> Credential
    {
        Credential(
            userIdentifier: user, provider: "example", accessToken: SecretString(access), refreshToken: refresh.map(SecretString.init),
            tokenType: "Bearer", scope: "read", expiresAt: Timestamp(millisecondsSince1970: 1_700_000_360_000),
            issuedAt: Timestamp(millisecondsSince1970: 1_700_000_000_000),
            sessionStartedAt: Timestamp(millisecondsSince1970: 1_690_000_000_000),
            readers: [.uid(1000), .group("backup")],
            enrolment: Enrolment(uid: 1000, pid: 42, at: Timestamp(millisecondsSince1970: 1_690_000_000_500))
        )
    }

    static func settings(
        _ server: PostgresServer, node: String, leaseMilliseconds: Int64 = 30_000, password: String? = PostgresServer.password
    )
        -> PostgresStoreSettings
    {
        PostgresStoreSettings(
            url: server.url, password: password, leaseMilliseconds: leaseMilliseconds, nodeName: node, reconcileMilliseconds: 500,
            // Generous: the full suite runs beside these on two CPUs, and a migration may wait for
            // another node's. A stopped server is detected by refused connections, not by this.
            operationTimeoutMilliseconds: 20_000
        )
    }

    static func open(_ server: PostgresServer, node: String, leaseMilliseconds: Int64 = 30_000, keyring: Keyring = Fixture.keyring)
        async throws
        -> PostgresCredentialStore
    {
        try await PostgresCredentialStore.open(
            settings: settings(server, node: node, leaseMilliseconds: leaseMilliseconds), keyring: keyring,
            logger: Logger(label: "test.\(node)")
        )
    }
}

/// Runs `body` with a fresh server, stopped afterwards whatever happens.
func withServer(_ body: (PostgresServer) async throws -> Void) async throws {
    let server = try await PostgresServer()
    do {
        try await body(server)
    } catch {
        await server.shutdown()
        throw error
    }
    await server.shutdown()
}

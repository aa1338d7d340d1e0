import Testing
import TokendClient
import TokendJSON
import TokendProtocol

struct TokendClientErrorTests {
    static let mapping: [(String, TokendClientError.Code)] = [
        ("io.tokend.TokenProvider.UnknownUser", .unknownUser),
        ("io.tokend.TokenProvider.PermissionDenied", .permissionDenied),
        ("io.tokend.TokenProvider.ReauthenticationRequired", .reauthenticationRequired),
        ("io.tokend.TokenProvider.RefreshFailed", .refreshFailed),
        ("io.tokend.TokenProvider.CredentialExists", .credentialExists),
        ("io.tokend.TokenProvider.UnknownProvider", .unknownProvider),
        ("io.tokend.TokenProvider.InvalidCredential", .invalidCredential),
        ("io.tokend.TokenProvider.StorageFailed", .storageFailed),
        ("io.tokend.TokenProvider.KeyRotationUnavailable", .keyRotationUnavailable),
        ("io.tokend.TokenProvider.LoginFailed", .loginFailed),
        ("io.tokend.TokenProvider.UnknownLogin", .unknownLogin),
        ("io.tokend.TokenProvider.InvalidMessage", .protocolError),
        ("org.varlink.service.InvalidParameter", .invalidParameter),
        ("org.varlink.service.MethodNotFound", .methodNotFound),
        ("org.varlink.service.MethodNotImplemented", .methodNotFound),
        ("org.varlink.service.InterfaceNotFound", .methodNotFound),
        ("org.varlink.service.ExpectedMore", .expectedMore),
        ("org.varlink.service.PermissionDenied", .permissionDenied),
        ("io.tokend.TokenProvider.SomethingNew", .other),
        ("com.example.Other", .other),
    ]

    @Test(arguments: mapping)
    func mapsErrorNamesToCodes(name: String, code: TokendClientError.Code) {
        #expect(TokendClientError.Code(varlinkErrorName: name) == code)
    }

    @Test func everyTokendErrorNameHasItsOwnCode() {
        for name in TokendErrorName.allCases {
            #expect(TokendClientError.Code(varlinkErrorName: name.rawValue) != .other, "\(name.rawValue) maps to other")
        }
    }

    @Test(arguments: [
        (VarlinkError.unknownUser("alice"), "tokend has no credential for user 'alice'"),
        (
            VarlinkError.permissionDenied("alice"),
            "permission denied: tokend does not let this caller use the credential of user 'alice'"
        ),
        (
            VarlinkError.reauthenticationRequired("alice", reason: "the session reached max_session_age"),
            "the login of user 'alice' has ended and needs a new login: the session reached max_session_age"
        ),
        (
            VarlinkError.refreshFailed("alice", reason: "the IdP answered 503", retryAt: nil),
            "tokend could not get a fresh enough token for user 'alice': the IdP answered 503"
        ),
        (VarlinkError.unknownProvider("nope"), "tokend has no provider named 'nope'"),
        (
            VarlinkError.invalidParameter("minValidSeconds"),
            "tokend refused parameter 'minValidSeconds' of io.tokend.TokenProvider.ProvideTokenReplacement"
        ),
        (
            VarlinkError.methodNotFound("io.tokend.TokenProvider.ProvideTokenReplacement"),
            "tokend does not implement io.tokend.TokenProvider.ProvideTokenReplacement"
        ),
    ])
    func messagesAreClear(error: VarlinkError, expected: String) {
        let call = VarlinkCall(
            method: TokenProviderMethod.provideTokenReplacement.rawValue,
            parameters: ["userIdentifier": .string("alice")]
        )
        let clientError = TokendClientError(varlinkErrorName: error.name, parameters: error.parameters, call: call)
        #expect(clientError.message == expected)
        #expect(clientError.description == expected)
    }

    @Test func messagesDropControlCharactersFromTheDaemon() {
        let call = VarlinkCall(
            method: TokenProviderMethod.provideTokenReplacement.rawValue,
            parameters: ["userIdentifier": .string("alice")]
        )
        let error = TokendClientError(
            varlinkErrorName: TokendErrorName.refreshFailed.rawValue,
            parameters: ["userIdentifier": .string("alice"), "reason": .string("bad\u{1B}[31m\nthing")],
            call: call
        )
        #expect(!error.message.contains("\u{1B}"))
        #expect(!error.message.contains("\n"))
    }

    @Test func equalityComparesCodesOnly() {
        #expect(TokendClientError(code: .timeout, message: "a") == TokendClientError(code: .timeout, message: "b"))
        #expect(TokendClientError(code: .timeout) != TokendClientError(code: .daemonUnavailable))
    }

    @Test func refreshFailedCarriesRetryAt() {
        let call = VarlinkCall(
            method: TokenProviderMethod.provideTokenReplacement.rawValue,
            parameters: ["userIdentifier": .string("alice")]
        )
        let error = TokendClientError(
            varlinkErrorName: TokendErrorName.refreshFailed.rawValue,
            parameters: ["userIdentifier": .string("alice"), "reason": .string("503"), "retryAt": .int(4_000_000_000)],
            call: call
        )
        #expect(error.retryAt == 4_000_000_000)
        #expect(error.message.contains("next attempt in"))
    }

    // MARK: No token in any error

    static let rejected = "REJECTED-eyJhbGciOiJSUzI1NiJ9.secret-part"
    static let access = "ACCESS-2YotnFZFEjr1zCsicMWpAA"
    static let refresh = "REFRESH-tGzv3JOkF0XG5Qx2TlKWIA"

    /// Every error name, answered by a hostile daemon that echoes the call's secrets back in
    /// every parameter an error can have.
    static var allErrorNames: [String] {
        TokendErrorName.allCases.map(\.rawValue) + [
            "org.varlink.service.InvalidParameter", "org.varlink.service.MethodNotFound",
            "org.varlink.service.InterfaceNotFound", "org.varlink.service.ExpectedMore", "com.example.Unknown",
        ]
    }

    @Test(arguments: allErrorNames)
    func errorsNeverShowTokensSentInTheCall(name: String) async throws {
        let server = try await TestVarlinkServer.start { call, _ in
            // Echo everything, secrets included, in every parameter and inside the reason.
            var parameters = call.parameters
            let secrets = ["accessToken", "refreshToken", "rejectedToken"].compactMap {
                call.parameters[$0]?.stringValue
            }
            let echo = "echo " + secrets.joined(separator: " ")
            for key in ["reason", "userIdentifier", "parameter", "method", "interface", "provider"] {
                parameters[key] = .string(echo)
            }
            parameters["nested"] = .object(["deeper": .array([.string(echo)])])
            return .reply([VarlinkReply(parameters: parameters, error: name)])
        }
        let client = TokendClient(socketPath: server.socketPath)

        let first = await #expect(throws: TokendClientError.self) {
            try await client.credentials(for: "alice", rejectedToken: Self.rejected)
        }
        let second = await #expect(throws: TokendClientError.self) {
            try await client.addCredential(
                AddCredentialRequest(
                    userIdentifier: "alice",
                    provider: "example",
                    accessToken: Self.access,
                    refreshToken: Self.refresh
                )
            )
        }
        for error in [first, second].compactMap({ $0 }) {
            let texts = [
                error.description, error.message, "\(error)", String(reflecting: error.parameters),
                JSONWriter.string(.object(error.parameters)),
            ]
            for text in texts {
                for token in [Self.rejected, Self.access, Self.refresh] {
                    #expect(!text.contains(token), "error \(name) shows a token")
                }
            }
        }
        #expect(first != nil && second != nil)
        await client.close()
        await server.stop()
    }

    @Test func credentialsAndRequestsNeverShowTokensWhenPrinted() {
        let credentials = Credentials(
            userIdentifier: "alice",
            accessToken: Self.access,
            tokenType: "Bearer",
            expiresAt: 1
        )
        let request = AddCredentialRequest(
            userIdentifier: "alice",
            provider: "p",
            accessToken: Self.access,
            refreshToken: Self.refresh
        )
        for text in ["\(credentials)", "\(request)"] {
            #expect(!text.contains(Self.access))
            #expect(!text.contains(Self.refresh))
        }
    }
}

import Testing
import TokendClient
import TokendJSON
import TokendProtocol

/// The client against a live in-test Varlink server on a temporary Unix socket.
struct TokendClientConnectionTests {
    @Test func answersACall() async throws {
        let server = try await TestVarlinkServer.start { call, _ in Canned.answer(call) }
        let client = TokendClient(socketPath: server.socketPath)
        let credentials = try await client.credentials(for: "alice")
        #expect(credentials.userIdentifier == "alice")
        #expect(credentials.accessToken == "token-of-alice")
        #expect(credentials.tokenType == "Bearer")
        #expect(server.received.map(\.call.method) == [TokenProviderMethod.provideTokenReplacement.rawValue])
        await client.close()
        await server.stop()
    }

    @Test func pipelinedCallsAnsweredInOneWriteAreMatchedInOrder() async throws {
        // The server answers only once both calls arrived, with both replies in one write.
        let server = try await TestVarlinkServer.start(batch: 2) { call, _ in Canned.answer(call) }
        let client = TokendClient(socketPath: server.socketPath)
        async let alice = client.credentials(for: "alice")
        async let bob = client.credentials(for: "bob")
        let (a, b) = try await (alice, bob)
        #expect(a.accessToken == "token-of-alice")
        #expect(b.accessToken == "token-of-bob")
        #expect(server.connectionCount == 1)
        #expect(server.received.count == 2)
        await client.close()
        await server.stop()
    }

    @Test func manyConcurrentCallsShareOneConnection() async throws {
        let server = try await TestVarlinkServer.start(batch: 5) { call, _ in Canned.answer(call) }
        let client = TokendClient(socketPath: server.socketPath)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for index in 0..<20 {
                group.addTask {
                    let user = "user\(index)"
                    let credentials = try await client.credentials(for: user)
                    #expect(credentials.accessToken == "token-of-\(user)")
                }
            }
            try await group.waitForAll()
        }
        #expect(server.connectionCount == 1)
        await client.close()
        await server.stop()
    }

    /// A status row of a credential issued at 1,000 that expires at 2,000.
    static func row(_ user: String, state: String = "valid") -> CredentialStatus {
        CredentialStatus(
            userIdentifier: user, provider: "example", state: state, expiresAt: 2_000, issuedAt: 1_000, sessionStartedAt: 1_000)
    }

    @Test func statusCollectsStreamedReplies() async throws {
        let daemon = DaemonStatus(version: "0.1.0", startedAt: 1_000, credentials: 3, valid: 3)
        let rows = ["alice", "bob", "carol"].map { Self.row($0) }
        let server = try await TestVarlinkServer.start { call, _ in
            switch call.method {
            case TokenProviderMethod.status.rawValue:
                guard call.more else { return .reply([Canned.error(.expectedMore)]) }
                return .reply([
                    VarlinkReply(
                        parameters: ["daemon": .object(daemon.json), "credentials": .array([.object(rows[0].json)])],
                        continues: true
                    ),
                    VarlinkReply(
                        parameters: ["credentials": .array([.object(rows[1].json), .object(rows[2].json)])],
                        continues: true
                    ),
                    VarlinkReply(parameters: ["credentials": .array([])]),
                ])
            default:
                return Canned.answer(call)
            }
        }
        let client = TokendClient(socketPath: server.socketPath)
        let status = try await client.status()
        #expect(status.daemon == daemon)
        #expect(status.credentials == rows)
        #expect(server.received.first?.call.more == true)
        // The connection stays in step after a streamed call.
        #expect(try await client.credentials(for: "dave").accessToken == "token-of-dave")
        #expect(server.connectionCount == 1)
        await client.close()
        await server.stop()
    }

    @Test func streamedAndSingleRepliesInOneWriteAreMatchedInOrder() async throws {
        let row = Self.row("alice")
        let server = try await TestVarlinkServer.start(batch: 2) { call, _ in
            if call.method == TokenProviderMethod.status.rawValue {
                return .reply([
                    VarlinkReply(parameters: ["credentials": .array([.object(row.json)])], continues: true),
                    VarlinkReply(parameters: ["credentials": .array([.object(row.json)])]),
                ])
            }
            return Canned.answer(call)
        }
        let client = TokendClient(socketPath: server.socketPath)
        async let status = client.status()
        async let credentials = client.credentials(for: "bob")
        let (s, c) = try await (status, credentials)
        #expect(s.credentials.count == 2)
        #expect(s.daemon == nil)
        #expect(c.accessToken == "token-of-bob")
        await client.close()
        await server.stop()
    }

    @Test func statusForOneUserIsASingleCall() async throws {
        var retrying = Self.row("alice", state: "retrying")
        retrying.lastError = "the IdP answered 503"
        let row = retrying
        let server = try await TestVarlinkServer.start { call, _ in
            .reply([VarlinkReply(parameters: ["credentials": .array([.object(row.json)])])])
        }
        let client = TokendClient(socketPath: server.socketPath)
        let status = try await client.status(userIdentifier: "alice")
        #expect(status.credentials == [row])
        let call = try #require(server.received.first?.call)
        #expect(call.more == false)
        #expect(call.parameters["userIdentifier"] == .string("alice"))
        await client.close()
        await server.stop()
    }

    @Test func timeoutFailsTheCallAndTheNextCallUsesAFreshConnection() async throws {
        let server = try await TestVarlinkServer.start { call, connection in
            connection == 0 ? .silence : Canned.answer(call)
        }
        let client = TokendClient(socketPath: server.socketPath, callTimeout: .seconds(1))
        let clock = ContinuousClock()
        let started = clock.now
        let error = await #expect(throws: TokendClientError.self) { try await client.credentials(for: "alice") }
        #expect(error?.code == .timeout)
        #expect(error?.message.contains("did not answer") == true)
        #expect(clock.now - started < .seconds(30), "the timeout fired instead of hanging")

        let credentials = try await client.credentials(for: "alice")
        #expect(credentials.accessToken == "token-of-alice")
        #expect(server.connectionCount == 2)
        await client.close()
        await server.stop()
    }

    @Test func callsQueuedBehindATimedOutCallFailToo() async throws {
        let server = try await TestVarlinkServer.start { call, connection in
            connection == 0 ? .silence : Canned.answer(call)
        }
        let client = TokendClient(socketPath: server.socketPath, callTimeout: .seconds(1))
        await expectBothFail(client, with: .timeout, on: "silent")
        #expect(try await client.credentials(for: "carol").accessToken == "token-of-carol")
        await client.close()
        await server.stop()
    }

    @Test func connectionLossFailsOutstandingCallsAndTheNextCallReconnects() async throws {
        // On the first connection the server takes both calls, then hangs up without answering.
        let server = try await TestVarlinkServer.start(batch: 2) { call, connection in
            connection == 0 ? .close : Canned.answer(call)
        }
        let client = TokendClient(socketPath: server.socketPath)
        await expectBothFail(client, with: .daemonUnavailable, on: "closed")
        // batch 2 on the new connection: send two calls so the server answers.
        async let third = client.credentials(for: "carol")
        async let fourth = client.credentials(for: "dave")
        let (c, d) = try await (third, fourth)
        #expect(c.accessToken == "token-of-carol")
        #expect(d.accessToken == "token-of-dave")
        #expect(server.connectionCount == 2)
        await client.close()
        await server.stop()
    }

    @Test func daemonRestartIsHandledOnTheNextCall() async throws {
        let path = TestVarlinkServer.temporarySocketPath()
        let first = try await TestVarlinkServer.start(socketPath: path) { call, _ in Canned.answer(call) }
        let client = TokendClient(socketPath: path, cachePolicy: .disabled)
        #expect(try await client.credentials(for: "alice").accessToken == "token-of-alice")

        await first.stop()
        let error = await #expect(throws: TokendClientError.self) { try await client.credentials(for: "alice") }
        #expect(error?.code == .daemonUnavailable)

        let second = try await TestVarlinkServer.start(socketPath: path) { call, _ in Canned.answer(call) }
        #expect(try await client.credentials(for: "bob").accessToken == "token-of-bob")
        #expect(second.connectionCount == 1)
        await client.close()
        await second.stop()
    }

    @Test func restartWithoutACallInBetweenIsTransparent() async throws {
        let path = TestVarlinkServer.temporarySocketPath()
        let first = try await TestVarlinkServer.start(socketPath: path) { call, _ in Canned.answer(call) }
        let client = TokendClient(socketPath: path)
        #expect(try await client.credentials(for: "alice").accessToken == "token-of-alice")
        await first.stop()
        let second = try await TestVarlinkServer.start(socketPath: path) { call, _ in Canned.answer(call) }
        // Whether or not the client noticed the old connection closing, this call succeeds:
        // a call that never reached a daemon is sent again on a fresh connection.
        #expect(try await client.credentials(for: "bob").accessToken == "token-of-bob")
        await client.close()
        await second.stop()
    }

    @Test func daemonNotRunningIsDaemonUnavailable() async throws {
        let client = TokendClient(socketPath: TestVarlinkServer.temporarySocketPath())
        let error = await #expect(throws: TokendClientError.self) { try await client.credentials(for: "alice") }
        #expect(error?.code == .daemonUnavailable)
        #expect(error?.message.contains("not running") == true)
    }

    @Test func invalidUserIdentifierIsRefusedBeforeConnecting() async throws {
        let client = TokendClient(socketPath: TestVarlinkServer.temporarySocketPath())
        for user in ["", "a b", "a/b", "tab\there", String(repeating: "x", count: 256)] {
            let error = await #expect(throws: TokendClientError.self) { try await client.credentials(for: user) }
            #expect(error?.code == .invalidParameter)
        }
    }

    @Test func sendsMinValidityRoundedUpAndTheRejectedToken() async throws {
        let server = try await TestVarlinkServer.start { call, _ in Canned.answer(call) }
        // The wire, not the cache: every call is a round trip.
        let client = TokendClient(socketPath: server.socketPath, cachePolicy: .disabled)
        _ = try await client.credentials(for: "alice")
        _ = try await client.credentials(for: "alice", minValidity: .milliseconds(1500), rejectedToken: "old-token")
        _ = try await client.credentials(for: "alice", minValidity: .seconds(-5))
        let calls = server.received.map(\.call)
        try #require(calls.count == 3)
        #expect(calls[0].parameters == ["userIdentifier": .string("alice")])
        #expect(
            calls[1].parameters == [
                "userIdentifier": .string("alice"), "minValidSeconds": .int(2), "rejectedToken": .string("old-token"),
            ]
        )
        #expect(calls[2].parameters == ["userIdentifier": .string("alice")])
        await client.close()
        await server.stop()
    }

    @Test func errorReplyBecomesTypedError() async throws {
        let server = try await TestVarlinkServer.start { call, _ in
            .reply([Canned.error(.unknownUser(call.parameters["userIdentifier"]?.stringValue ?? "?"))])
        }
        let client = TokendClient(socketPath: server.socketPath)
        let error = await #expect(throws: TokendClientError.self) { try await client.credentials(for: "alice") }
        #expect(error?.code == .unknownUser)
        #expect(error?.message == "tokend has no credential for user 'alice'")
        #expect(error?.errorName == TokendErrorName.unknownUser.rawValue)
        #expect(error?.userIdentifier == "alice")
        #expect(error?.method == TokenProviderMethod.provideTokenReplacement.rawValue)
        // An error reply leaves the connection usable.
        _ = await #expect(throws: TokendClientError.self) { try await client.removeCredential("bob") }
        #expect(server.connectionCount == 1)
        await client.close()
        await server.stop()
    }

    @Test func malformedRepliesAreProtocolErrors() async throws {
        let server = try await TestVarlinkServer.start { call, _ in
            let user = call.parameters["userIdentifier"]?.stringValue ?? "?"
            switch user {
            case "wrongtype": return .reply([VarlinkReply(parameters: ["credentials": .string("nope")])])
            case "otheruser": return .reply([Canned.credentials("mallory")])
            case "missing": return .reply([VarlinkReply(parameters: [:])])
            default: return Canned.answer(call)
            }
        }
        let client = TokendClient(socketPath: server.socketPath)
        for user in ["wrongtype", "otheruser", "missing"] {
            let error = await #expect(throws: TokendClientError.self) { try await client.credentials(for: user) }
            #expect(error?.code == .protocolError)
        }
        #expect(try await client.credentials(for: "alice").accessToken == "token-of-alice")
        await client.close()
        await server.stop()
    }

    @Test func replyToACallWithoutMoreThatContinuesEndsTheConnection() async throws {
        let server = try await TestVarlinkServer.start { call, connection in
            if connection == 0 {
                return .reply([VarlinkReply(parameters: [:], continues: true), VarlinkReply(parameters: [:])])
            }
            return Canned.answer(call)
        }
        let client = TokendClient(socketPath: server.socketPath)
        let error = await #expect(throws: TokendClientError.self) { try await client.credentials(for: "alice") }
        #expect(error?.code == .protocolError)
        #expect(try await client.credentials(for: "alice").accessToken == "token-of-alice")
        #expect(server.connectionCount == 2)
        await client.close()
        await server.stop()
    }

    @Test func onewayCallsGetNoReplyAndKeepTheConnectionInStep() async throws {
        let server = try await TestVarlinkServer.start { call, _ in
            call.oneway ? .silence : Canned.answer(call)
        }
        let client = TokendClient(socketPath: server.socketPath)
        let replies = try await client.call(
            VarlinkCall(
                method: TokenProviderMethod.provideTokenReplacement.rawValue,
                parameters: ["userIdentifier": .string("x")],
                oneway: true
            )
        )
        #expect(replies.isEmpty)
        #expect(try await client.credentials(for: "alice").accessToken == "token-of-alice")
        #expect(server.received.count == 2)
        await client.close()
        await server.stop()
    }

    @Test func cancellationEndsTheWaitPromptly() async throws {
        let server = try await TestVarlinkServer.start { _, _ in .silence }
        let client = TokendClient(socketPath: server.socketPath, callTimeout: .seconds(30))
        let task = Task { try await client.credentials(for: "alice") }
        while server.received.isEmpty { try await Task.sleep(for: .milliseconds(10)) }
        task.cancel()
        let clock = ContinuousClock()
        let started = clock.now
        let result = await task.result
        #expect(clock.now - started < .seconds(15), "cancellation ended the wait long before the 30 s timeout")
        guard case .failure(let error) = result else {
            Issue.record("a cancelled call succeeded")
            return
        }
        #expect((error as? TokendClientError)?.code == .cancelled)
        await client.close()
        await server.stop()
    }

    @Test func typedMethodsSendTheirCalls() async throws {
        let server = try await TestVarlinkServer.start { call, _ in
            switch call.method {
            case TokenProviderMethod.rotateKey.rawValue:
                return .reply([VarlinkReply(parameters: ["keyId": .string("k2"), "reencrypted": .int(7)])])
            case "org.varlink.service.GetInfo":
                return .reply([
                    VarlinkReply(parameters: [
                        "vendor": .string("tokend"), "product": .string("tokend"), "version": .string("0.1.0"),
                        "url": .string("https://example.invalid"),
                        "interfaces": .array([.string("org.varlink.service"), .string("io.tokend.TokenProvider")]),
                    ])
                ])
            case "org.varlink.service.GetInterfaceDescription":
                return .reply([VarlinkReply(parameters: ["description": .string(TokenProviderInterface.description)])])
            default:
                return .reply([VarlinkReply()])
            }
        }
        let client = TokendClient(socketPath: server.socketPath)
        let rotated = try await client.rotateKey()
        #expect(rotated.keyID == "k2")
        #expect(rotated.reencrypted == 7)
        let info = try await client.getInfo()
        #expect(info.interfaces.contains("io.tokend.TokenProvider"))
        #expect(try await client.interfaceDescription("io.tokend.TokenProvider") == TokenProviderInterface.description)
        try await client.addCredential(
            AddCredentialRequest(userIdentifier: "alice", provider: "example", accessToken: "a", readers: ["uid:1000"])
        )
        try await client.removeCredential("alice")
        let methods = server.received.map(\.call.method)
        #expect(
            methods == [
                TokenProviderMethod.rotateKey.rawValue, "org.varlink.service.GetInfo",
                "org.varlink.service.GetInterfaceDescription",
                TokenProviderMethod.addCredential.rawValue, TokenProviderMethod.removeCredential.rawValue,
            ]
        )
        #expect(server.received[3].call.parameters["readers"] == .array([.string("uid:1000")]))
        await client.close()
        await server.stop()
    }

    @Test func socketPathComesFromTheEnvironmentOrTheDefault() {
        #expect(TokendClient.socketPath(environment: nil) == "/run/tokend/io.tokend")
        #expect(TokendClient.socketPath(environment: "") == "/run/tokend/io.tokend")
        #expect(TokendClient.socketPath(environment: "/tmp/x.sock") == "/tmp/x.sock")
        #expect(TokendClient(socketPath: "/tmp/y.sock").socketPath == "/tmp/y.sock")
    }
}

/// Runs `body` and returns its outcome, so several concurrent failures can be inspected.
/// Asks for alice's and bob's tokens at once and expects both calls to fail with `code`.
func expectBothFail(_ client: TokendClient, with code: TokendClientError.Code, on connection: String) async {
    async let first: Result<Credentials, TokendClientError> = capture { () async throws(TokendClientError) in
        try await client.credentials(for: "alice")
    }
    async let second: Result<Credentials, TokendClientError> = capture { () async throws(TokendClientError) in
        try await client.credentials(for: "bob")
    }
    for result in await [first, second] {
        guard case .failure(let error) = result else {
            Issue.record("a call on the \(connection) connection succeeded")
            continue
        }
        #expect(error.code == code)
    }
}

func capture<T>(_ body: () async throws(TokendClientError) -> T) async -> Result<T, TokendClientError> {
    do {
        return .success(try await body())
    } catch {
        return .failure(error)
    }
}

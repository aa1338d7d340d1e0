import Synchronization
import Testing
import TokendClient
import TokendJSON
import TokendProtocol

/// The cache, `updates(for:)` and the completion-handler API against the in-test server.
struct TokendClientCacheAndUpdatesTests {
    static func watchReply(_ token: String, user: String = "alice") -> VarlinkReply {
        var reply = Canned.credentials(user, token: token)
        reply.continues = true
        return reply
    }

    @Test func cacheHitsDoNotReachTheServer() async throws {
        let server = try await TestVarlinkServer.start { call, _ in Canned.answer(call) }
        let client = TokendClient(socketPath: server.socketPath)
        for _ in 0..<5 {
            #expect(
                try await client.credentials(for: "alice", minValidity: .seconds(60)).accessToken == "token-of-alice")
        }
        #expect(server.received.count == 1)
        #expect(client.statistics == TokendClient.Statistics(roundTrips: 1, cacheHits: 4))
        // Another user is another entry.
        _ = try await client.credentials(for: "bob")
        #expect(server.received.count == 2)
        await client.close()
        await server.stop()
    }

    @Test func aRejectedCachedTokenIsReportedOnceThenTheNewOneIsCached() async throws {
        let server = try await TestVarlinkServer.start { call, _ in
            let user = call.parameters["userIdentifier"]?.stringValue ?? "?"
            return .reply([Canned.credentials(user, token: call.parameters["rejectedToken"] == nil ? "old" : "new")])
        }
        let client = TokendClient(socketPath: server.socketPath)
        #expect(try await client.credentials(for: "alice").accessToken == "old")
        #expect(try await client.credentials(for: "alice", rejectedToken: "old").accessToken == "new")
        // Late reports of the old token, and plain calls, are answered by the cache.
        #expect(try await client.credentials(for: "alice", rejectedToken: "old").accessToken == "new")
        #expect(try await client.credentials(for: "alice").accessToken == "new")
        let calls = server.received.map(\.call)
        #expect(calls.count == 2)
        #expect(calls.last?.parameters["rejectedToken"] == .string("old"))
        await client.close()
        await server.stop()
    }

    @Test func anErrorReplyDropsTheCachedToken() async throws {
        // The call that asks for more validity finds the credential removed.
        let server = try await TestVarlinkServer.start { call, _ in
            call.parameters["minValidSeconds"] != nil
                ? .reply([Canned.error(.unknownUser("alice"))]) : Canned.answer(call)
        }
        let client = TokendClient(socketPath: server.socketPath)
        _ = try await client.credentials(for: "alice")
        // More validity than the cached token has: asked, and the credential is gone.
        await #expect(throws: TokendClientError(code: .unknownUser)) {
            try await client.credentials(for: "alice", minValidity: .seconds(1_000_000_000))
        }
        _ = try await client.credentials(for: "alice")
        #expect(server.received.count == 3, "the removed credential's token was not served from the cache")
        await client.close()
        await server.stop()
    }

    @Test func updatesSkipTheDeliveredTokenAfterAReconnectAndEndWithTheTypedError() async throws {
        let path = TestVarlinkServer.temporarySocketPath()
        var server = try await TestVarlinkServer.start(socketPath: path) { _, _ in .reply([Self.watchReply("t1")]) }
        let client = TokendClient(socketPath: path)
        var iterator = client.updates(for: "alice", backoff: ReconnectBackoff(initial: .milliseconds(20)))
            .makeAsyncIterator()
        #expect(try await iterator.next()?.accessToken == "t1")
        let watch = try #require(server.received.first?.call)
        #expect(watch.method == TokenProviderMethod.watch.rawValue && watch.more)

        // The daemon restarts; its first reply repeats t1, then t2 follows.
        await server.stop()
        server = try await TestVarlinkServer.start(socketPath: path) { _, _ in
            .reply([Self.watchReply("t1"), Self.watchReply("t2")])
        }
        #expect(try await iterator.next()?.accessToken == "t2")
        // Restarted again, and the credential is gone.
        await server.stop()
        server = try await TestVarlinkServer.start(socketPath: path) { _, _ in
            .reply([Canned.error(.unknownUser("alice"))])
        }
        await #expect(throws: TokendClientError(code: .unknownUser)) { _ = try await iterator.next() }
        #expect(try await iterator.next() == nil)
        #expect(client.statistics.roundTrips == 3)
        await server.stop()
    }

    @Test func aMalformedUpdateEndsTheStreamWithAProtocolError() async throws {
        let server = try await TestVarlinkServer.start { _, _ in
            .reply([VarlinkReply(parameters: ["credentials": .string("not an object")], continues: true)])
        }
        let client = TokendClient(socketPath: server.socketPath)
        await #expect(throws: TokendClientError(code: .protocolError)) {
            for try await _ in client.updates(for: "alice") {}
        }
        await server.stop()
    }

    @Test func updatesFailAtOnceWhenTheDaemonIsNotRunning() async throws {
        let client = TokendClient(socketPath: TestVarlinkServer.temporarySocketPath())
        await #expect(throws: TokendClientError(code: .daemonUnavailable)) {
            for try await _ in client.updates(for: "alice") {}
        }
        await #expect(throws: TokendClientError(code: .invalidParameter)) {
            for try await _ in client.updates(for: "no spaces allowed") {}
        }
    }

    @Test func theCompletionHandlerIsCalledOnceOnTimeout() async throws {
        let server = try await TestVarlinkServer.start { _, _ in .silence }
        let client = TokendClient(socketPath: server.socketPath, callTimeout: .milliseconds(200))
        let results = Mutex<[Result<Credentials, any Error>]>([])
        client.provideTokenReplacement(userIdentifier: "alice") { result in results.withLock { $0.append(result) } }
        let deadline = ContinuousClock.now + .seconds(30)
        while results.withLock({ $0.isEmpty }), ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(10))
        }
        // Past the backstop (2 × 200 ms + 1 s): still one call.
        try await Task.sleep(for: .milliseconds(1500))
        let all = results.withLock { $0 }
        #expect(all.count == 1)
        if case .failure(let error)? = all.first {
            #expect((error as? TokendClientError)?.code == .timeout)
        } else {
            Issue.record("expected a timeout")
        }
        await client.close()
        await server.stop()
    }
}

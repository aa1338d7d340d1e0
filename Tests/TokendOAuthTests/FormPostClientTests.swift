import NIOCore
import NIOHTTP1
import NIOPosix
import Synchronization
import Testing

@testable import TokendOAuth

@Suite struct FormPostTargetTests {
    @Test func httpsWithTheDefaultPortLeavesThePortOutOfHost() throws {
        let target = try #require(FormPostTarget("https://idp.example.com/o/token/?tenant=a#frag"))
        #expect(target.tls && target.host == "idp.example.com" && target.port == 443)
        #expect(target.requestTarget == "/o/token/?tenant=a")
        #expect(target.hostHeader == "idp.example.com")
        #expect(target.serverName == "idp.example.com")
    }

    @Test func loopbackHTTPWithAPortAndNoPath() throws {
        let target = try #require(FormPostTarget("http://127.0.0.1:8080"))
        #expect(!target.tls && target.port == 8080 && target.requestTarget == "/")
        #expect(target.hostHeader == "127.0.0.1:8080")
        #expect(target.serverName == nil, "no SNI for an IP address")
    }

    @Test func ipv6HostsAreBracketedInHost() throws {
        let target = try #require(FormPostTarget("http://[::1]:9000/token?x=1"))
        #expect(target.host == "::1" && target.hostHeader == "[::1]:9000" && target.requestTarget == "/token?x=1")
        #expect(target.serverName == nil)
    }

    @Test func otherSchemesAndBrokenURLsAreRefused() {
        #expect(FormPostTarget("ftp://example.com/") == nil)
        #expect(FormPostTarget("https://user@example.com/") == nil)
        #expect(FormPostTarget("not a url") == nil)
    }

    @Test func theHeadCarriesHostHeadersAndLength() throws {
        let target = try #require(FormPostTarget("https://idp.example.com:8443/token"))
        let head = target.head(headers: [("Accept", "application/json")], bodyLength: 42)
        #expect(head.method == .POST && head.uri == "/token" && head.version == .http1_1)
        #expect(head.headers["Host"] == ["idp.example.com:8443"])
        #expect(head.headers["Content-Length"] == ["42"])
        #expect(head.headers["Accept"] == ["application/json"])
    }
}

/// ``FormPostClient`` against a small HTTP server on 127.0.0.1 whose answers each test sets.
@Suite struct FormPostClientTests {
    /// How the test server answers a request.
    enum Answer: Sendable {
        /// Status and body; `chunks` > 1 sends the body chunked in that many parts.
        case respond(status: Int, body: String, chunks: Int = 1, close: Bool = false, retryAfter: String? = nil, location: String? = nil)
        /// Reads the request and never answers.
        case silence
        /// Closes the connection once the request has arrived.
        case hangUp
    }

    /// What the server saw: connections accepted and the requests (head line and body).
    final class Recorder: Sendable {
        private let state = Mutex<(connections: Int, requests: [String])>((0, []))
        private let children = Mutex<[any Channel]>([])
        func connected(_ child: any Channel) {
            state.withLock { $0.connections += 1 }
            children.withLock { $0.append(child) }
        }
        /// Closes every connection the server accepted, as a keep-alive timeout would.
        func dropAll() async {
            for child in children.withLock({ $0 }) { try? await child.close() }
        }
        func received(_ request: String) -> Int {
            state.withLock {
                $0.requests.append(request)
                return $0.requests.count
            }
        }
        var connections: Int { state.withLock { $0.connections } }
        var requests: [String] { state.withLock { $0.requests } }
    }

    /// On a loop of its own: the shared singleton group's loops can be busy with other tests.
    final class TestServer: Sendable {
        let channel: any Channel
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let recorder = Recorder()
        var port: Int { channel.localAddress!.port! }
        var url: String { "http://127.0.0.1:\(port)/o/token/" }

        /// `answer` gets the request's number (1 for the first).
        init(_ answer: @escaping @Sendable (Int) -> Answer) async throws {
            let recorder = recorder
            channel = try await ServerBootstrap(group: group)
                .childChannelInitializer { child in
                    recorder.connected(child)
                    return child.eventLoop.makeCompletedFuture {
                        try child.pipeline.syncOperations.configureHTTPServerPipeline()
                        try child.pipeline.syncOperations.addHandler(Responder(answer: answer, recorder: recorder))
                    }
                }
                .bind(host: "127.0.0.1", port: 0).get()
        }

        func close() async throws {
            try await channel.close()
            try await group.shutdownGracefully()
        }
    }

    final class Responder: ChannelInboundHandler {
        typealias InboundIn = HTTPServerRequestPart
        typealias OutboundOut = HTTPServerResponsePart
        let answer: @Sendable (Int) -> Answer
        let recorder: Recorder
        var line = ""
        var body = ""

        init(answer: @escaping @Sendable (Int) -> Answer, recorder: Recorder) {
            self.answer = answer
            self.recorder = recorder
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            switch unwrapInboundIn(data) {
            case .head(let head):
                line = "\(head.method) \(head.uri) host=\(head.headers["Host"].first ?? "")"
                body = ""
            case .body(let buffer):
                body += String(buffer: buffer)
            case .end:
                let number = recorder.received(line + " " + body)
                respond(answer(number), context: context)
            }
        }

        func respond(_ answer: Answer, context: ChannelHandlerContext) {
            switch answer {
            case .silence:
                return
            case .hangUp:
                context.close(promise: nil)
            case .respond(let status, let text, let chunks, let close, let retryAfter, let location):
                var headers = HTTPHeaders([("Content-Type", "application/json")])
                if chunks > 1 {
                    headers.add(name: "Transfer-Encoding", value: "chunked")
                } else {
                    headers.add(name: "Content-Length", value: String(text.utf8.count))
                }
                if close { headers.add(name: "Connection", value: "close") }
                if let retryAfter { headers.add(name: "Retry-After", value: retryAfter) }
                if let location { headers.add(name: "Location", value: location) }
                context.write(
                    wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: .init(statusCode: status), headers: headers))),
                    promise: nil)
                let bytes = Array(text.utf8)
                let size = max(1, (bytes.count + chunks - 1) / max(chunks, 1))
                var start = 0
                while start < bytes.count {
                    let end = min(bytes.count, start + size)
                    context.write(wrapOutboundOut(.body(.byteBuffer(ByteBuffer(bytes: bytes[start..<end])))), promise: nil)
                    start = end
                }
                let done = context.writeAndFlush(wrapOutboundOut(.end(nil)))
                if close { done.whenComplete { _ in context.close(promise: nil) } }
            }
        }
    }

    /// Deadlines are generous on purpose: at the start of the parallel suite a 2-core machine
    /// can leave a loop unscheduled for seconds, and these tests are not about timing.
    static func post(_ client: FormPostClient, to url: String, timeout: TimeAmount = .seconds(30), limit: Int = 1024) async -> Result<
        FormPostResponse, FormPostFailure
    > {
        do {
            return .success(
                try await client.post(
                    url: url, headers: [("Accept", "application/json")], body: "grant_type=refresh_token&refresh_token=rt-1",
                    caFile: nil, maximumBodyBytes: limit, deadline: .now() + timeout))
        } catch {
            return .failure(error)
        }
    }

    static func client() -> (FormPostClient, MultiThreadedEventLoopGroup) {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        return (FormPostClient(group: group, connectTimeout: .seconds(30)), group)
    }

    @Test func answersAreReadAndKeptAliveConnectionsReused() async throws {
        let server = try await TestServer { n in .respond(status: 200, body: #"{"access_token":"a\#(n)"}"#) }
        let (client, group) = Self.client()
        for n in 1...3 {
            let response = try await Self.post(client, to: server.url).get()
            #expect(response.status == 200 && String(decoding: response.body, as: UTF8.self) == #"{"access_token":"a\#(n)"}"#)
        }
        #expect(server.recorder.connections == 1, "one connection carried all three")
        #expect(
            server.recorder.requests.first == "POST /o/token/ host=127.0.0.1:\(server.port) grant_type=refresh_token&refresh_token=rt-1")
        #expect(client.idleConnectionCount == 1)
        await client.shutdown()
        try await server.close()
        try await group.shutdownGracefully()
    }

    @Test func aServerThatClosesGetsANewConnectionEachTime() async throws {
        let server = try await TestServer { _ in .respond(status: 200, body: "{}", close: true) }
        let (client, group) = Self.client()
        for _ in 1...3 { _ = try await Self.post(client, to: server.url).get() }
        #expect(server.recorder.connections == 3)
        #expect(client.idleConnectionCount == 0)
        await client.shutdown()
        try await server.close()
        try await group.shutdownGracefully()
    }

    @Test func chunkedBodiesStatusAndRetryAfterArrive() async throws {
        let body = String(repeating: "x", count: 900)
        let server = try await TestServer { _ in .respond(status: 503, body: body, chunks: 7, retryAfter: "12") }
        let (client, group) = Self.client()
        let response = try await Self.post(client, to: server.url).get()
        #expect(response.status == 503 && response.retryAfter == "12" && response.body.count == 900)
        await client.shutdown()
        try await server.close()
        try await group.shutdownGracefully()
    }

    /// A redirect is an answer, never followed: the refresh token goes to the configured
    /// endpoint only.
    @Test(arguments: [301, 302, 307, 308])
    func redirectsAreNotFollowed(status: Int) async throws {
        let elsewhere = try await TestServer { _ in .respond(status: 200, body: #"{"access_token":"stolen"}"#) }
        let server = try await TestServer { _ in .respond(status: status, body: "", location: elsewhere.url) }
        let (client, group) = Self.client()
        let response = try await Self.post(client, to: server.url).get()
        #expect(response.status == status)
        #expect(elsewhere.recorder.requests.isEmpty, "nothing reached the Location")
        await client.shutdown()
        try await server.close()
        try await elsewhere.close()
        try await group.shutdownGracefully()
    }

    @Test func anAnswerOverTheLimitIsRefusedAfterSending() async throws {
        let server = try await TestServer { _ in .respond(status: 200, body: String(repeating: "y", count: 5000), chunks: 5) }
        let (client, group) = Self.client()
        guard case .failure(let failure) = await Self.post(client, to: server.url, limit: 1024) else {
            Issue.record("a 5,000-byte answer passed a 1,024-byte limit")
            return
        }
        #expect(failure.kind == .tooBig && failure.requestSent)
        #expect(client.idleConnectionCount == 0, "the connection is not kept")
        await client.shutdown()
        try await server.close()
        try await group.shutdownGracefully()
    }

    @Test(arguments: [Answer.silence, .hangUp])
    func noAnswerToARequestThatWentOutIsAnUnansweredFailure(answer: Answer) async throws {
        let server = try await TestServer { _ in answer }
        let (client, group) = Self.client()
        // Silence ends at the deadline; a hang-up comes first, however loaded the machine is.
        let timeout: TimeAmount = if case .silence = answer { .milliseconds(400) } else { .seconds(30) }
        guard case .failure(let failure) = await Self.post(client, to: server.url, timeout: timeout) else {
            Issue.record("\(answer) produced an answer")
            return
        }
        #expect(failure.requestSent)
        if case .silence = answer { #expect(failure.kind == .timeout) } else { #expect(failure.kind == .closed) }
        // Written is not yet read: on a loaded machine the server's handler may see the request
        // after the client's 400 ms have passed.
        let deadline = ContinuousClock.now + .seconds(30)
        while server.recorder.requests.isEmpty, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(10))
        }
        #expect(server.recorder.requests.count == 1, "the request reached the server")
        #expect(!failure.description.contains("rt-1"))
        await client.shutdown()
        try await server.close()
        try await group.shutdownGracefully()
    }

    @Test func nothingListeningFailsBeforeSending() async throws {
        let server = try await TestServer { _ in .silence }
        let url = server.url
        try await server.close()
        let (client, group) = Self.client()
        guard case .failure(let failure) = await Self.post(client, to: url) else {
            Issue.record("connected to a closed port")
            return
        }
        #expect(failure.kind == .connect && !failure.requestSent)
        await client.shutdown()
        try await group.shutdownGracefully()
    }

    /// A kept connection the server closes while it is idle (its keep-alive timeout) is not
    /// used again: the next post opens a new one and succeeds.
    @Test func aConnectionClosedWhileIdleIsReplaced() async throws {
        let server = try await TestServer { _ in .respond(status: 200, body: "{}") }
        let (client, group) = Self.client()
        _ = try await Self.post(client, to: server.url).get()
        #expect(client.idleConnectionCount == 1)
        await server.recorder.dropAll()
        // The client's loop sees the close; bounded by count, not a timing claim.
        var rounds = 0
        while client.idleConnectionCount > 0, rounds < 500 {
            try await Task.sleep(for: .milliseconds(10))
            rounds += 1
        }
        let second = await Self.post(client, to: server.url)
        #expect(throws: Never.self) { try second.get() }
        #expect(server.recorder.connections == 2)
        await client.shutdown()
        #expect(await Self.post(client, to: server.url).failureKind == .shutDown, "a client shut down refuses posts")
        try await server.close()
        try await group.shutdownGracefully()
    }
}

extension Result where Failure == FormPostFailure {
    var failureKind: FormPostFailure.Kind? {
        if case .failure(let failure) = self { return failure.kind }
        return nil
    }
}

import NIOCore
import NIOPosix
import Synchronization
import Testing
import TokendConfig
import TokendCore

@testable import TokendOAuth

/// A grant whose request fails in transport: `.transient` when nothing can have reached the
/// token endpoint, `.unanswered` when the request went out and no answer came back (the provider
/// may have rotated the refresh token). Against real sockets on 127.0.0.1.
@Suite struct TransportOutcomeTests {
    /// A TCP server that reads requests and never answers, or closes the connection once a
    /// request has arrived. Counts the bytes it received.
    final class ByteCount: Sendable {
        private let count = Mutex(0)
        func add(_ bytes: Int) -> Int {
            count.withLock {
                $0 += bytes
                return $0
            }
        }
        var value: Int { count.withLock { $0 } }
    }

    final class SilentServer: Sendable {
        let channel: any Channel
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let received = ByteCount()
        var port: Int { channel.localAddress!.port! }

        init(closeAfterRequest: Bool) async throws {
            let received = self.received
            channel = try await ServerBootstrap(group: group)
                .childChannelInitializer { child in
                    child.eventLoop.makeCompletedFuture {
                        try child.pipeline.syncOperations.addHandler(Swallower(received: received, close: closeAfterRequest))
                    }
                }
                .bind(host: "127.0.0.1", port: 0).get()
        }

        func close() async throws {
            try await channel.close()
            try await group.shutdownGracefully()
        }
    }

    final class Swallower: ChannelInboundHandler, Sendable {
        typealias InboundIn = ByteBuffer
        let received: ByteCount
        let close: Bool
        init(received: ByteCount, close: Bool) {
            self.received = received
            self.close = close
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            let bytes = unwrapInboundIn(data).readableBytes
            let total = received.add(bytes)
            // The whole request (head and form body) is well over 100 bytes.
            if close, total > 100 { context.close(promise: nil) }
        }
    }

    static func refresh(port: Int) async throws -> GrantOutcome {
        // The silent server's request must have arrived before the deadline, on a loaded machine too.
        let pool = HTTPClientPool(timeouts: .init(connect: .seconds(10), request: .seconds(5)))
        let client = TokenEndpointClient(pool: pool)
        let outcome = await client.refresh(
            endpoint: "http://127.0.0.1:\(port)/o/token/",
            settings: OAuth2Settings(
                clientID: "tokend-test", clientSecret: SecretString("s3cr3t"), clientAuthentication: .clientSecretBasic),
            refreshToken: SecretString("rt-that-must-not-leak"), now: { Timestamp(secondsSince1970: 1_800_000_000) }
        )
        await pool.shutdown()
        return outcome
    }

    @Test func nothingListeningIsATransientFailure() async throws {
        let server = try await SilentServer(closeAfterRequest: false)
        let port = server.port
        try await server.close()
        let outcome = try await Self.refresh(port: port)
        guard case .transient(let reason, nil) = outcome else {
            Issue.record("a refused connection sent nothing: \(outcome)")
            return
        }
        #expect(!reason.contains("rt-that-must-not-leak"))
    }

    @Test(arguments: [false, true])
    func aRequestSentButNeverAnsweredIsUnanswered(closeAfterRequest: Bool) async throws {
        let server = try await SilentServer(closeAfterRequest: closeAfterRequest)
        let outcome = try await Self.refresh(port: server.port)
        let received = server.received.value
        try await server.close()
        #expect(received > 100, "the request reached the server")
        guard case .unanswered(let reason) = outcome else {
            Issue.record("sent and not answered (close: \(closeAfterRequest)): \(outcome)")
            return
        }
        #expect(!reason.contains("rt-that-must-not-leak"))
    }
}

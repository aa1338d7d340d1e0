import Foundation
import Testing
import TokendClient
import TokendProtocol

#if canImport(Glibc)
    import Glibc
#endif

/// tokend refuses a connection beyond its limits at accept: it writes the error (`QuotaExceeded`)
/// as the connection's only message and closes. Under load that can reach the client, and the
/// connection close, before the client has even written its call; the call must still get the
/// refusal as its answer, not "the connection to tokend was closed" (which `tokenctl` would turn
/// into exit status 3, "tokend is not running", instead of 13).
@Suite(.serialized)
struct RefusalAtAcceptTests {
    static let refusal = #"{"error":"io.tokend.TokenProvider.QuotaExceeded","parameters":{"quota":"connections","limit":16}}"#

    /// A server that answers one connection with `refusal` at once and closes it, as tokend's
    /// accept path does.
    final class RefusingServer: Sendable {
        let path: String
        private let listener: Int32

        init() throws {
            let directory = NSTemporaryDirectory() + "refusal-" + UUID().uuidString.prefix(8)
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            path = directory + "/s.sock"
            listener = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            var address = sockaddr_un()
            address.sun_family = sa_family_t(AF_UNIX)
            let path = path
            withUnsafeMutableBytes(of: &address.sun_path) { buffer in
                buffer.copyBytes(from: Array(path.utf8))
                buffer[path.utf8.count] = 0
            }
            let bound = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
            }
            guard bound == 0, listen(listener, 8) == 0 else { throw POSIXError(.EADDRINUSE) }
        }

        /// Accepts one connection (within 10 s), writes the refusal and closes.
        func refuseOne() -> Bool {
            var ready = pollfd(fd: listener, events: Int16(POLLIN), revents: 0)
            guard poll(&ready, 1, 10_000) == 1 else { return false }
            let connection = accept(listener, nil, nil)
            guard connection >= 0 else { return false }
            let bytes = Array(RefusalAtAcceptTests.refusal.utf8) + [0]
            let written = write(connection, bytes, bytes.count)
            close(connection)
            return written == bytes.count
        }

        deinit {
            close(listener)
            unlink(path)
        }
    }

    @Test func aCallMadeAfterTheRefusalArrivedGetsTheRefusal() async throws {
        let server = try RefusingServer()
        let refused = Task.detached { server.refuseOne() }
        let connection = try await TokendConnection.connect(socketPath: server.path)
        #expect(await refused.value)
        // The refusal and the close arrive before anything is sent.
        let deadline = ContinuousClock.now + .seconds(10)
        while connection.isActive, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(5)) }
        #expect(!connection.isActive)
        let replies = try await connection.call(VarlinkCall(method: "io.tokend.TokenProvider.Status"), timeout: .seconds(5))
        #expect(replies.count == 1)
        #expect(replies.first?.error == "io.tokend.TokenProvider.QuotaExceeded", "\(replies)")
        await connection.close()
    }

    @Test func theClientSaysTheQuotaNotThatTheDaemonIsGone() async throws {
        let server = try RefusingServer()
        let refused = Task.detached { server.refuseOne() }
        let client = TokendClient(socketPath: server.path)
        // Whether the refusal arrives before or after the call is written, the call is refused.
        await #expect(throws: TokendClientError(code: .quotaExceeded)) { _ = try await client.status() }
        #expect(await refused.value)
        await client.close()
    }
}

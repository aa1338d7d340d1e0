import Foundation
import Testing
import TokendClient
import TokendProtocol

#if canImport(Glibc)
    import Glibc
#endif

/// A Unix socket whose accept queue is full refuses a connect at once (EAGAIN) instead of
/// waiting as TCP does. Under a burst of clients, or another user's flood, a caller must be
/// delayed until the daemon accepts it, not failed: both of the client's paths try again until
/// their timeout.
@Suite(.serialized)
struct FullAcceptQueueTests {
    /// A listening socket that accepts nothing until told to, its queue filled by connections
    /// of its own.
    final class FullListener {
        let path: String
        private let directory: String
        private let listener: Int32
        private var fillers: [Int32] = []

        init() throws {
            directory = NSTemporaryDirectory() + "full-queue-" + UUID().uuidString.prefix(8)
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            path = directory + "/s.sock"
            listener = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            var address = Self.address(path)
            let bound = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
            }
            guard bound == 0, listen(listener, 0) == 0 else { throw POSIXError(.EADDRINUSE) }
            // Connect until the kernel says the queue is full (a handful at most).
            for _ in 0..<64 {
                let filler = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
                let result = withUnsafePointer(to: &address) {
                    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(filler, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
                }
                if result != 0 {
                    let code = errno
                    close(filler)
                    guard code == EAGAIN else { throw POSIXError(POSIXErrorCode(rawValue: code) ?? .EIO) }
                    return
                }
                fillers.append(filler)
            }
            throw POSIXError(.ENOBUFS)
        }

        static func address(_ path: String) -> sockaddr_un {
            var address = sockaddr_un()
            address.sun_family = sa_family_t(AF_UNIX)
            withUnsafeMutableBytes(of: &address.sun_path) { buffer in
                buffer.copyBytes(from: Array(path.utf8))
                buffer[path.utf8.count] = 0
            }
            return address
        }

        /// Empties the queue: the fillers' connections are accepted and closed, and the first
        /// connection that sends a call gets `reply`.
        func serveOne(reply: String) throws {
            for filler in fillers { close(filler) }
            fillers = []
            while true {
                // Bounded: a client that gave up never connects.
                var ready = pollfd(fd: listener, events: Int16(POLLIN), revents: 0)
                guard poll(&ready, 1, 10_000) == 1 else { throw FullQueueError.noCallCame }
                let connection = accept(listener, nil, nil)
                guard connection >= 0 else { throw POSIXError(.EIO) }
                defer { close(connection) }
                var received: [UInt8] = []
                var chunk = [UInt8](repeating: 0, count: 4096)
                while !received.contains(0) {
                    let count = read(connection, &chunk, chunk.count)
                    if count <= 0 { break }
                    received += chunk[..<count]
                }
                guard received.contains(0) else { continue }  // a filler: closed unread
                let bytes = Array(reply.utf8) + [0]
                _ = bytes.withUnsafeBytes { write(connection, $0.baseAddress, $0.count) }
                return
            }
        }

        deinit {
            for filler in fillers { close(filler) }
            close(listener)
            try? FileManager.default.removeItem(atPath: directory)
        }
    }

    enum FullQueueError: Error { case noCallCame }

    static let reply = #"{"parameters":{"vendor":"test"}}"#

    /// Gives a client that refuses at once time to do so, then empties the queue: a client that
    /// waits gets its reply.
    static func expectAnswered(_ call: @escaping @Sendable (String) async throws -> String?) async throws {
        let listener = try FullListener()
        let path = listener.path
        let answer = Task { try await call(path) }
        // A client that does not try again has failed by now (its first connect is refused at
        // once); one that does is still waiting.
        let deadline = ContinuousClock.now + .milliseconds(300)
        while ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(10))
        }
        let served = Result { try listener.serveOne(reply: reply) }
        // The client's own error first: it says why no call came.
        let vendor = try await answer.value
        try served.get()
        #expect(vendor == "test")
        withExtendedLifetime(listener) {}
    }

    @Test func aOneShotCallWaitsForRoomInTheQueue() async throws {
        try await Self.expectAnswered { path in
            let reply = try OneShotCall.perform(VarlinkCall(method: "org.varlink.service.GetInfo"), socketPath: path, timeout: .seconds(20))
            return reply.parameters["vendor"]?.stringValue
        }
    }

    @Test func aConnectionWaitsForRoomInTheQueue() async throws {
        try await Self.expectAnswered { path in
            let connection = try await TokendConnection.connect(socketPath: path, connectTimeout: .seconds(20))
            let replies = try await connection.call(VarlinkCall(method: "org.varlink.service.GetInfo"), timeout: .seconds(20))
            await connection.close()
            return replies.first?.parameters["vendor"]?.stringValue
        }
    }
}

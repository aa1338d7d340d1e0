import Foundation
import NIOCore
import NIOPosix
import Synchronization
import Testing

@testable import TokendServer

#if canImport(Glibc)
    import Glibc
#endif

/// Real loops, a real socket, the listener's own acceptors.
final class AcceptorsTestServer: Sendable {
    let group = MultiThreadedEventLoopGroup(numberOfThreads: 2)
    let acceptors: Acceptors
    let channels: [any Channel]
    let path: String

    init(directory: URL) async throws {
        path = directory.appendingPathComponent("a.sock").path
        var loops: [any EventLoop] = []
        for loop in group.makeIterator() { loops.append(loop) }
        let acceptors = Acceptors(loops: loops)
        self.acceptors = acceptors
        let listening = try SocketListener.listeningSocket(at: path)
        var channels: [any Channel] = []
        for index in loops.indices {
            let descriptor = index == 0 ? listening : fcntl(listening, F_DUPFD_CLOEXEC, 0)
            let channel = try await ServerBootstrap(group: loops[index], childGroup: loops[index])
                .serverChannelOption(.autoRead, value: false)
                .childChannelInitializer { channel in
                    acceptors.accepted(channel)
                    return channel.eventLoop.makeSucceededVoidFuture()
                }
                .withBoundSocket(descriptor).get()
            acceptors.add(channel, loop: index)
            channels.append(channel)
        }
        self.channels = channels
        acceptors.start()
    }

    func stop() async throws {
        for channel in channels { try await channel.close() }
        try await group.shutdownGracefully()
    }
}

final class FailureCount: Sendable {
    let count = Mutex(0)
}

/// Every event loop listens on the one socket; one at a time accepts, and the turn moves to a
/// loop serving fewer connections.
@Suite struct AcceptorsTests {
    @Test(arguments: [
        ([0, 0], 0, 0), ([0, 0], 1, 1), ([1, 0], 0, 1), ([1, 1], 1, 1), ([2, 1, 1], 0, 1), ([3, 3, 2], 1, 2), ([5], 0, 0),
    ])
    func theTurnStaysUnlessAnotherLoopServesFewer(open: [Int], current: Int, next: Int) {
        #expect(AcceptorChoice.next(open: open, current: current) == next)
    }

    static func temporaryDirectory() throws -> URL {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("acceptors-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        return directory
    }

    /// Clients connecting one after another are spread evenly over the loops, and a loop whose
    /// connections closed gets the next ones. (If one loop kept the turn, every connection would
    /// be on it; if both accepted at once, NIO's debug build would stop on its assertion that a
    /// readable listening socket yields a connection.)
    @Test func connectionsSpreadEvenlyOverTheLoops() async throws {
        let directory = try Self.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let server = try await AcceptorsTestServer(directory: directory)
        var clients: [CInt] = []
        for count in 1...8 {
            clients.append(try Self.connect(server.path))
            try await Self.waitUntil { server.acceptors.openPerLoop.reduce(0, +) == count }
            let open = server.acceptors.openPerLoop
            #expect(open.max()! - open.min()! <= 1, "after \(count) connections: \(open)")
        }
        for client in clients { close(client) }
        try await Self.waitUntil { server.acceptors.openPerLoop == [0, 0] }
        clients = []
        for count in 1...2 {
            clients.append(try Self.connect(server.path))
            try await Self.waitUntil { server.acceptors.openPerLoop.reduce(0, +) == count }
        }
        #expect(server.acceptors.openPerLoop == [1, 1])
        for client in clients { close(client) }
        try await server.stop()
    }

    /// Many clients connecting and closing at once: every connection is accepted (none waits
    /// for ever in the backlog while no loop has the turn), and the counts come back to zero.
    @Test func everyConnectionOfABurstIsAccepted() async throws {
        let directory = try Self.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let server = try await AcceptorsTestServer(directory: directory)
        let path = server.path
        let failures = FailureCount()
        await withTaskGroup(of: Void.self) { group in
            for _ in 0..<4 {
                group.addTask {
                    for _ in 0..<250 {
                        guard let client = try? Self.connect(path) else {
                            failures.count.withLock { $0 += 1 }
                            continue
                        }
                        // Wait for the server to have accepted it: its close arrives as EOF.
                        var byte: UInt8 = 0
                        shutdown(client, Int32(SHUT_WR))
                        var timeout = timeval(tv_sec: 10, tv_usec: 0)
                        setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
                        if recv(client, &byte, 1, 0) != 0 { failures.count.withLock { $0 += 1 } }
                        close(client)
                    }
                }
            }
        }
        #expect(failures.count.withLock { $0 } == 0)
        try await Self.waitUntil { server.acceptors.openPerLoop == [0, 0] }
        #expect(server.acceptors.readingLoop != nil)
        try await server.stop()
    }

    static func connect(_ path: String) throws -> CInt {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        let connected = UnixSocketFileTests.withAddress(path) { Glibc.connect(fd, $0, $1) }
        guard connected == 0 else {
            close(fd)
            throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO)
        }
        return fd
    }

    /// Polls `condition` every 5 ms for up to 30 s.
    static func waitUntil(_ condition: () -> Bool) async throws {
        let deadline = ContinuousClock.now + .seconds(30)
        while !condition() {
            guard ContinuousClock.now < deadline else {
                Issue.record("condition not met within 30 s")
                return
            }
            try await Task.sleep(for: .milliseconds(5))
        }
    }
}

import Foundation
import Testing
import TokendTestSupport

/// Where tokend puts its socket: with its configured mode from the moment it can be reached,
/// never over a socket another tokend serves, over one a dead daemon left, never over another
/// kind of file.
@Suite struct SocketPlacementTests {
    static func mode(_ path: String) -> mode_t? {
        var info = stat()
        return lstat(path, &info) == 0 ? info.st_mode & 0o7777 : nil
    }

    @Test func aServedSocketIsLeftAloneAndADeadDaemonsSocketIsReplaced() async throws {
        let first = try DaemonProcess(configuration: DaemonProcess.configuration(extraDaemon: #"socket_mode = "0660""#))
        try await first.start()
        let socket = first.socketPath
        #expect(Self.mode(socket) == 0o660)

        // A second daemon configured with the same socket: one line naming the path, and the
        // first keeps serving.
        let second = try DaemonProcess(configuration: DaemonProcess.configuration(extraDaemon: "socket = \"\(socket)\""))
        await #expect(throws: TestFailure.self) { try await second.start(timeout: .seconds(60)) }
        #expect(second.process.terminationStatus != 0)
        #expect(second.log.contains("another process is already serving on \(socket)"), "\(second.log)")
        #expect(RawClient.canConnect(socket))

        // The first one dies without removing its socket: a new daemon replaces the file, with
        // its own mode, and leaves nothing else in the directory.
        _ = try await first.stop(signal: SIGKILL)
        #expect(Self.mode(socket) != nil && !RawClient.canConnect(socket))
        let third = try DaemonProcess(directory: first.directory)
        try await third.start()
        defer { _ = Task { try? await third.stop() } }
        #expect(Self.mode(socket) == 0o666)
        let names = try FileManager.default.contentsOfDirectory(atPath: first.directory.path)
        #expect(!names.contains { $0.hasSuffix(".binding") }, "\(names)")
    }

    @Test func aFileThatIsNotASocketIsNeverReplaced() async throws {
        let daemon = try DaemonProcess()
        try daemon.directory.write("tokend.sock", "not a socket\n")
        await #expect(throws: TestFailure.self) { try await daemon.start(timeout: .seconds(60)) }
        #expect(daemon.log.contains("exists and is not a socket; refusing to replace it"), "\(daemon.log)")
        #expect((try? String(contentsOfFile: daemon.socketPath, encoding: .utf8)) == "not a socket\n")
    }
}

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

    /// Runs `command` as uid/gid 65534 (what another local user can do) and returns its status.
    static func asNobody(_ command: String, _ arguments: [String]) async throws -> Int32 {
        let result = try await runCommand(
            "/usr/bin/setpriv", ["--reuid=65534", "--regid=65534", "--clear-groups", command] + arguments, stdin: "")
        return result.status
    }

    /// The socket's directory is writable by every user and has no sticky bit, and another user
    /// planted a link to a root-owned file, or a directory, under the name tokend bound its
    /// socket at before moving it into place. tokend starts, leaves the planted name and what a
    /// link points to alone, and its socket has its mode.
    @Test(arguments: ["link", "directory"])
    func aNamePlantedInAWritableDirectoryIsNeverFollowedOrInTheWay(planted: String) async throws {
        let protected = try ScratchDirectory()
        try protected.write("root-only", "root's file\n", mode: 0o600)
        let target = protected.file("root-only")
        let daemon = try DaemonProcess(configuration: DaemonProcess.configuration(extraDaemon: #"socket_mode = "0666""#))
        #expect(chmod(daemon.directory.path, 0o777) == 0)
        let name = daemon.directory.file(".tokend.sock.binding")
        switch planted {
        case "link": #expect(try await Self.asNobody("/bin/ln", ["-s", target, name]) == 0)
        default: #expect(try await Self.asNobody("/bin/mkdir", [name]) == 0)
        }
        var before = stat()
        #expect(lstat(name, &before) == 0 && before.st_uid == 65534)

        try await daemon.start()
        defer { _ = Task { try? await daemon.stop() } }
        #expect(Self.mode(daemon.socketPath) == 0o666)
        #expect(Self.mode(target) == 0o600)
        #expect((try? String(contentsOfFile: target, encoding: .utf8)) == "root's file\n")
        var after = stat()
        #expect(
            lstat(name, &after) == 0 && after.st_ino == before.st_ino && after.st_mode == before.st_mode, "the planted name is as it was")
        #expect(daemon.log.contains("other users may write the socket's directory (no sticky bit)"), "\(daemon.log)")
        // Another user can connect to it.
        let reply = try await OtherUser.call(
            #"{"method":"org.varlink.service.GetInfo"}"#, socket: daemon.socketPath, uid: 65534, gid: 65534)
        #expect((reply["parameters"] as? [String: Any])?["product"] as? String == "tokend", "\(reply)")
    }
}

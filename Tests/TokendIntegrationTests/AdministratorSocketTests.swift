import Foundation
import Testing
import TokendTestSupport

/// The administrators' socket beside the public one: root is answered there whatever other users
/// do to the public socket, nobody else can connect to it, and socket activation passes both.
@Suite(.serialized)
struct AdministratorSocketTests {
    static let statusCall = #"{"method":"io.tokend.TokenProvider.Status","parameters":{}}"#

    /// `bench/flood.py` run as uid 65534: `connections` connections kept in flight against
    /// `socket`, each reconnecting as soon as the daemon closes it.
    static func flood(_ socket: String, connections: Int, seconds: Int) throws -> StreamingCommand {
        try StreamingCommand(
            "/usr/bin/setpriv",
            [
                "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", Repository.root + "/bench/flood.py", "--socket",
                socket, "--connections", "\(connections)", "--seconds", "\(seconds)",
            ])
    }

    /// Every connection of the public socket is taken, the administrators' reserve included (root
    /// holds it), while uid 65534 keeps hundreds of refused connections coming: `tokenctl status`
    /// as root is answered (through the administrators' socket); named explicitly, the public
    /// socket refuses root; uid 65534 cannot even connect to the administrators' socket.
    @Test func rootIsAnsweredWhileEveryPublicConnectionSlotIsTakenAndAUserFloods() async throws {
        // 16 connections: 4 reserved for administrators, 12 for one uid.
        let daemon = try DaemonProcess(
            configuration: DaemonProcess.configuration(
                extraDaemon: "max_connections = 16\nreserved_admin_connections = 4\nmax_connections_per_uid = 12"))
        try await daemon.start()
        defer { _ = Task { try? await daemon.stop() } }
        let socket = daemon.socketPath
        let administrators = socket + ".admin"
        #expect(try RawClient(path: socket).call(Tokens.addCall(user: "alice", access: Tokens.random("a-"), refresh: "r")).errorName == nil)

        // uid 65534 takes its 12, root the 4 kept for administrators.
        let reports = daemon.directory.file("reports")
        try FileManager.default.createDirectory(atPath: reports, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o777])
        let report = reports + "/hog.json"
        let hog = Task {
            try await MultiUserTests.python(MultiUserTests.connectionHog, as: 65534, [socket, "12", "120", report], timeout: .seconds(180))
        }
        defer { FileManager.default.createFile(atPath: report + ".stop", contents: nil) }
        try await pollUntil(timeout: .seconds(60), "the hog holds its connections") { FileManager.default.fileExists(atPath: report) }
        var held: [RawClient] = []
        for _ in 0..<4 {
            let client = try RawClient(path: socket)
            #expect(try client.call(Self.statusCall).errorName == nil)
            held.append(client)
        }
        let refused = try RawClient(path: socket).call(Self.statusCall)
        #expect(refused.errorName == "io.tokend.TokenProvider.QuotaExceeded", "every public slot is taken: \(refused)")

        let flood = try Self.flood(socket, connections: 300, seconds: 60)
        defer { kill(flood.processIdentifier, SIGKILL) }
        try await pollUntil(timeout: .seconds(30), "the flood is refused") {
            daemon.log.contains("connection refused: connection limit reached")
        }

        // Root, as tokenctl chooses: answered.
        let status = try await runCommand(
            "/usr/bin/env", ["TOKEND_SOCKET=\(socket)", Repository.binary("tokenctl"), "status"], timeout: .seconds(30))
        #expect(status.status == 0, "\(status.stdout) \(status.stderr)")
        #expect(status.stdout.contains("alice"), "\(status.stdout)")
        // The public socket, named: refused like anyone else's connection beyond the limits.
        let publicOnly = try await runCommand(Repository.binary("tokenctl"), ["--socket", socket, "status"], timeout: .seconds(30))
        #expect(publicOnly.status == 13, "\(publicOnly.stdout) \(publicOnly.stderr)")
        // uid 65534 cannot connect to the administrators' socket at all.
        let denied = try await runCommand(
            "/usr/bin/setpriv",
            [
                "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c",
                "import socket, sys\ns = socket.socket(socket.AF_UNIX)\ntry:\n    s.connect(sys.argv[1])\nexcept PermissionError:\n    sys.exit(3)\n",
                administrators,
            ])
        #expect(denied.status == 3, "uid 65534 connecting to \(administrators): \(denied)")
        _ = held
        kill(flood.processIdentifier, SIGKILL)
        FileManager.default.createFile(atPath: report + ".stop", contents: nil)
        _ = try? await hog.value
    }

    /// Without an administrators' socket (`admin_socket = ""`, or an older tokend), root's
    /// tokenctl falls back to the public socket.
    @Test func rootFallsBackToThePublicSocketWhenThereIsNoOther() async throws {
        let daemon = try DaemonProcess(configuration: DaemonProcess.configuration(extraDaemon: #"admin_socket = """#))
        try await daemon.start()
        defer { _ = Task { try? await daemon.stop() } }
        #expect(!FileManager.default.fileExists(atPath: daemon.socketPath + ".admin"))
        let status = try await runCommand(
            "/usr/bin/env", ["TOKEND_SOCKET=\(daemon.socketPath)", Repository.binary("tokenctl"), "status"], timeout: .seconds(30))
        #expect(status.status == 0, "\(status.stdout) \(status.stderr)")
        let token = try await runCommand(
            "/usr/bin/env", ["TOKEND_SOCKET=\(daemon.socketPath)", Repository.binary("tokenctl"), "token", "nobody-here"],
            timeout: .seconds(30))
        #expect(token.stderr.contains("nobody-here"), "the one-shot path reached the daemon too: \(token)")
        try await daemon.stop()
    }

    /// systemd passes both sockets, named by `FileDescriptorName=`: tokend serves the public one
    /// to everyone and the administrators' one to administrators only, refusing anyone else who
    /// reaches it (here after a `chmod` that opened it to every user).
    @Test func socketActivationPassesBothSocketsByName() async throws {
        let directory = try ScratchDirectory()
        try directory.write("tokend.toml", DaemonProcess.configuration())
        try directory.write("client-secret", "test-client-secret\n", mode: 0o600)
        let notify = try DatagramListener(path: directory.file("notify.sock"))
        let passed = directory.file("passed.sock")
        let administrators = directory.file("passed-admin.sock")
        let daemon = try LaunchedProcess(
            directory: directory, executable: "/usr/bin/systemd-socket-activate",
            arguments: [
                "-l", passed, "-l", administrators, "--fdname=varlink:admin", "-E", "NOTIFY_SOCKET=\(notify.path)",
                Repository.binary("tokend"), "--config", directory.file("tokend.toml"),
            ])
        defer { _ = Task { try? await daemon.stop() } }
        // A file appears at bind, before listen: wait until both accept connections.
        try await pollUntil(timeout: .seconds(10), "the sockets listen") {
            RawClient.canConnect(passed) && RawClient.canConnect(administrators)
        }
        let client = try RawClient(path: passed)
        #expect(await notify.waitFor { $0.contains { $0["READY"] == "1" } }, "\(daemon.log)")
        #expect(try client.call(Tokens.addCall(user: "bob", access: Tokens.random("b-"), refresh: "r")).errorName == nil)

        let admin = try RawClient(path: administrators).call(Self.statusCall)
        #expect(admin.errorName == nil, "\(admin) \(daemon.log)")
        #expect((admin.parameters["credentials"] as? [[String: Any]])?.count == 1)
        #expect(!daemon.log.contains("several sockets"), "\(daemon.log)")

        #expect(chmod(administrators, 0o666) == 0 && chmod(passed, 0o666) == 0)
        let stranger = try await Self.callAsNobody(Self.statusCall, socket: administrators)
        #expect(stranger.errorName == "io.tokend.TokenProvider.PermissionDenied", "\(stranger)")
        let user = try await Self.callAsNobody(Self.statusCall, socket: passed)
        #expect(user.errorName == nil, "\(user)")
        #expect(try await daemon.stop() == 0)
    }

    /// One call as uid/gid 65534.
    static func callAsNobody(_ call: String, socket: String) async throws -> [String: Any] {
        try await OtherUser.call(call, socket: socket, uid: 65534, gid: 65534)
    }
}

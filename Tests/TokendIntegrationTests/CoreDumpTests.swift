import Foundation
import Testing

/// tokend marks itself not dumpable at start (`PR_SET_DUMPABLE` 0): no core file with tokens in
/// it, and other processes of its own uid can neither read its `/proc/PID/environ` or `mem` nor
/// `ptrace` it (issue 8, point 6).
@Suite(.serialized)
struct CoreDumpTests {
    static let uid: UInt32 = 65534

    /// The owner of `/proc/PID/environ`: the process's uid when dumpable, root when not.
    static func procOwner(_ pid: Int32) -> uid_t? {
        var info = stat()
        guard stat("/proc/\(pid)/environ", &info) == 0 else { return nil }
        return info.st_uid
    }

    @Test func tokendRunningAsAnotherUidIsNotDumpable() async throws {
        try #require(geteuid() == 0, "needs root to start tokend as uid \(Self.uid)")
        let directory = try ScratchDirectory()
        try directory.write("tokend.toml", DaemonProcess.configuration())
        try directory.write("client-secret", "test-client-secret\n", mode: 0o600)
        #expect(chown(directory.path, Self.uid, Self.uid) == 0)
        #expect(chown(directory.file("client-secret"), Self.uid, Self.uid) == 0)
        let daemon = Process()
        daemon.executableURL = URL(fileURLWithPath: "/usr/bin/setpriv")
        daemon.arguments = [
            "--reuid=\(Self.uid)", "--regid=\(Self.uid)", "--clear-groups", Repository.binary("tokend"), "--config",
            directory.file("tokend.toml"),
        ]
        daemon.standardOutput = FileHandle.nullDevice
        daemon.standardError = FileHandle.nullDevice
        // The control: any other process of that uid is dumpable, so its /proc files are its own.
        let control = Process()
        control.executableURL = URL(fileURLWithPath: "/usr/bin/setpriv")
        control.arguments = ["--reuid=\(Self.uid)", "--regid=\(Self.uid)", "--clear-groups", "/bin/sleep", "30"]
        try daemon.run()
        try control.run()
        defer {
            kill(control.processIdentifier, SIGKILL)
            if daemon.isRunning { kill(daemon.processIdentifier, SIGKILL) }
        }
        let socket = directory.file("tokend.sock")
        let deadline = ContinuousClock.now + .seconds(20)
        while !RawClient.canConnect(socket), daemon.isRunning, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(50))
        }
        try #require(RawClient.canConnect(socket), "tokend started as uid \(Self.uid)")
        // setpriv execs tokend in the same process, so the pid is tokend's.
        #expect(Self.procOwner(daemon.processIdentifier) == 0, "tokend's /proc files belong to root: it is not dumpable")
        #expect(Self.procOwner(control.processIdentifier) == Self.uid, "the control process of the same uid is dumpable")
        // A process of tokend's own uid cannot read its environment.
        let read = try await runCommand(
            "/usr/bin/setpriv",
            ["--reuid=\(Self.uid)", "--regid=\(Self.uid)", "--clear-groups", "/bin/cat", "/proc/\(daemon.processIdentifier)/environ"])
        #expect(read.status != 0, "same-uid read of /proc/PID/environ must fail")
        let readControl = try await runCommand(
            "/usr/bin/setpriv",
            ["--reuid=\(Self.uid)", "--regid=\(Self.uid)", "--clear-groups", "/bin/cat", "/proc/\(control.processIdentifier)/environ"])
        #expect(readControl.status == 0, "the same read of a dumpable process works: \(readControl.stderr)")
        try await terminate(daemon)
    }
}

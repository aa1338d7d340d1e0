import Foundation
import TokendTestSupport

/// The real `tokend`, given its sockets as systemd gives them (`LISTEN_FDS`, `LISTEN_PID`,
/// `LISTEN_FDNAMES`), by a small launcher that binds them with the modes a socket unit would
/// set, then execs tokend in its own process. Optionally as another uid, and optionally on what
/// looks to tokend like a kernel before 6.5: a seccomp filter makes `getsockopt(SO_PEERPIDFD)`
/// fail with `ENOPROTOOPT`, exactly as Debian 12's own kernel (6.1) answers it.
///
/// Not `systemd-socket-activate`: it closes the descriptor through which Foundation learns that
/// the child it started has ended, and Foundation then reaps no other child of the test while
/// it runs (so `runCommand` would hang).
final class PassedSocketsDaemon: @unchecked Sendable {
    // @unchecked: the Process is only touched from the test that owns this object.
    struct Socket {
        var path: String
        var name: String
        var mode: mode_t
    }

    let directory: ScratchDirectory
    let process = Process()
    let logPath: String

    /// Binds `sockets`, installs the filter, drops to `uid`, and execs tokend.
    static let launcher = #"""
        import ctypes, fcntl, os, socket, struct, sys
        args = sys.argv[1:]
        uid, deny, sockets = None, False, []
        while args[0] != "--":
            if args[0] == "--uid":
                uid = int(args[1]); args = args[2:]
            elif args[0] == "--deny-peerpidfd":
                deny = True; args = args[1:]
            else:
                path, name, mode = args[1], args[2], int(args[3], 8)
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                if os.path.exists(path):
                    os.unlink(path)  # left by the daemon before, as a socket unit's would be
                s.bind(path)
                os.chmod(path, mode)
                s.listen(128)
                sockets.append((s, name)); args = args[4:]
        command = args[1:]
        libc = ctypes.CDLL(None, use_errno=True)
        if uid is not None:
            os.setgroups([]); os.setgid(uid); os.setuid(uid)
        if deny:
            # x86_64: getsockopt(fd, SOL_SOCKET, SO_PEERPIDFD=77) -> ENOPROTOOPT (92); all else allowed.
            def op(code, jt, jf, k): return struct.pack("HBBI", code, jt, jf, k)
            program = b"".join([
                op(0x20, 0, 0, 4), op(0x15, 0, 7, 0xC000003E),   # arch == x86_64, else allow
                op(0x20, 0, 0, 0), op(0x15, 0, 5, 55),           # nr == getsockopt
                op(0x20, 0, 0, 24), op(0x15, 0, 3, 1),           # level == SOL_SOCKET
                op(0x20, 0, 0, 32), op(0x15, 0, 1, 77),          # optname == SO_PEERPIDFD
                op(0x06, 0, 0, 0x00050000 | 92),                 # ENOPROTOOPT
                op(0x06, 0, 0, 0x7FFF0000),                      # allow
            ])
            buffer = ctypes.create_string_buffer(program, len(program))
            class Prog(ctypes.Structure):
                _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
            prog = Prog(len(program) // 8, ctypes.addressof(buffer))
            if libc.prctl(38, 1, 0, 0, 0) != 0 or libc.prctl(22, 2, ctypes.byref(prog), 0, 0) != 0:
                sys.exit("seccomp: %s" % os.strerror(ctypes.get_errno()))
        # Out of the way first, so that moving one to 3 + i never closes another.
        high = [fcntl.fcntl(s.fileno(), fcntl.F_DUPFD, 100) for s, _ in sockets]
        for index, descriptor in enumerate(high):
            os.dup2(descriptor, 3 + index, inheritable=True)
        environment = dict(os.environ)
        environment.update(LISTEN_PID=str(os.getpid()), LISTEN_FDS=str(len(sockets)),
                           LISTEN_FDNAMES=":".join(name for _, name in sockets))
        os.execve(command[0], command, environment)
        """#

    /// Whether the seccomp filter that hides `SO_PEERPIDFD` can be used here.
    static var canHidePeerPidfd: Bool {
        #if arch(x86_64)
            true
        #else
            false
        #endif
    }

    /// - Parameters:
    ///   - configuration: tokend.toml's text.
    ///   - directory: the scratch directory (a new one by default).
    init(configuration: String = DaemonProcess.configuration(), directory: ScratchDirectory? = nil) throws {
        // The directory, configuration, client secret and log as DaemonProcess lays them out.
        let prepared = try DaemonProcess(configuration: configuration, directory: directory)
        self.directory = prepared.directory
        logPath = prepared.logPath
    }

    /// Starts tokend on `sockets` and waits until the first one answers.
    func start(sockets: [Socket], uid: UInt32? = nil, hidePeerPidfd: Bool = false) async throws {
        var arguments = ["-c", Self.launcher]
        if let uid { arguments += ["--uid", "\(uid)"] }
        if hidePeerPidfd { arguments.append("--deny-peerpidfd") }
        for socket in sockets { arguments += ["--socket", socket.path, socket.name, String(socket.mode, radix: 8)] }
        arguments += ["--", Repository.binary("tokend"), "--config", directory.file("tokend.toml")]
        process.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        process.arguments = arguments
        process.environment = SystemdIntegrationTests.environment([:])
        let log = FileHandle(forWritingAtPath: logPath)!
        log.seekToEndOfFile()
        process.standardOutput = log
        process.standardError = log
        try process.run()
        let first = sockets[0].path
        try await pollUntil(timeout: .seconds(60), "tokend answers on \(first): \(self.log)") {
            guard process.isRunning else { throw TestFailure("tokend exited: \(self.log)") }
            return self.log.contains("tokend ready")
        }
    }

    var log: String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }

    @discardableResult
    func stop(signal: Int32 = SIGTERM, timeout: Duration = .seconds(20)) async throws -> Int32 {
        try await terminate(process, signal: signal, timeout: timeout)
    }

    deinit {
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
    }
}

import Foundation
import Testing
import TokendTestSupport

/// Program readers against a connection handed on (issue 43), with the real daemon and clients
/// of other uids: a program reader grants only a call written by the process that connected,
/// while it runs the file it ran at accept, in tokend's pid namespace. The named program is a copy
/// of the Python interpreter (`exe:COPY@sha256:…`); the other programs run `/usr/bin/python3.11`.
@Suite(.serialized, .enabled(if: CgroupHierarchy.root != nil, "no writable cgroup v2 hierarchy (root needed)"))
struct ProgramReaderHandoverTests {
    typealias Units = ProgramReaderTests.Units

    /// A daemon whose credential `pinned` only the copy of the interpreter reads, and the units
    /// to run clients in.
    struct Pinned {
        let units: Units
        let directory: ScratchDirectory
        let copy: String
        let daemon: DaemonProcess

        static func start() async throws -> Pinned {
            let units = try Units()
            let directory = try ScratchDirectory()
            let (copy, hash) = try await ProgramReaderTests.pythonCopy(in: directory)
            let daemon = try await ProgramReaderTests.daemon(credentials: [("pinned", ["exe:\(copy)@sha256:\(hash)"])])
            return Pinned(units: units, directory: directory, copy: copy, daemon: daemon)
        }

        /// Runs `executable` with `arguments` as uid 65534 in demo.service and returns its
        /// output.
        func run(_ executable: String, _ arguments: [String]) async throws -> CommandResult {
            try await ProgramReaderTests.run(executable, arguments, unit: "demo.service", units: units, uid: 65534)
        }

        /// Runs `script` with the interpreter (the socket, the token call, the named program and
        /// `mode` as arguments) and returns the reply it printed; its exit status may be that of a
        /// killed process.
        func handover(_ script: String, mode: String = "exec") async throws -> [String: Any] {
            let result = try await run(
                "/usr/bin/python3", ["-c", script, daemon.socketPath, Tokens.tokenCall(user: "pinned"), copy, mode])
            return try Self.reply(result)
        }

        static func reply(_ result: CommandResult) throws -> [String: Any] {
            guard !result.stdout.isEmpty else { throw TestFailure("no reply (\(result.status)): \(result.stderr)") }
            return try RawClient.object(result.stdout)
        }

        /// `reply` refused the token, and the journal says `why`.
        func expectRefused(_ reply: [String: Any], why: String) {
            #expect(reply.accessToken == nil && reply.errorName == ProgramReaderTests.permissionDenied, "\(reply)")
            #expect(daemon.log.contains(why), "\(daemon.log.suffix(1500))")
        }

        func stop() async throws {
            _ = try await daemon.stop()
            await units.remove()
        }
    }

    /// Python for the scripts below: `connect()` to the socket in argv[1], and `wait_for(parent)`
    /// until that process runs the named program in argv[3] (with `gone`, or has exited).
    static let prelude = """
        import os, signal, socket, sys, time
        \(OtherUser.pythonExchange)
        named = sys.argv[3]

        def connect():
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(20)
            s.connect(sys.argv[1])
            return s

        def wait_for(parent, gone=False):
            deadline = time.time() + 20
            while time.time() < deadline:
                try:
                    if os.readlink("/proc/%d/exe" % parent) == named:
                        return
                except OSError:
                    if gone:
                        return
                time.sleep(0.01)
        """

    /// The handover of issue 43: connects, forks, and the connecting process execs the program
    /// named in argv[3] with arguments that make it wait; the child, still holding the
    /// connection, waits until its parent runs that program, then sends the call from argv[2],
    /// prints the reply and kills its parent.
    static let callFromAChildAfterTheConnectorExeced = """
        \(prelude)
        s = connect()
        parent = os.getpid()
        if os.fork() != 0:
            os.execv(named, [named, "-c", "import time; time.sleep(60)"])
        wait_for(parent)
        reply = exchange(s, sys.argv[2].encode())
        os.kill(parent, signal.SIGKILL)
        sys.stdout.write(reply.decode())
        """

    /// The connecting process writes the call itself, then execs the program named in argv[3]
    /// (or, with argv[4] `exit`, exits) before tokend decides: it first makes tokend accept the
    /// connection (one call answered), then sends calls whose replies tokend cannot write while
    /// nobody reads (it holds the calls behind them), the call from argv[2] last, forks, and
    /// execs. The child waits until its parent runs that program (or is gone), reads every reply
    /// and prints the last one.
    static let callWrittenBeforeTheConnectorExeced = """
        \(prelude)
        s = connect()
        exchange(s, b'{"method":"org.varlink.service.GetInfo","parameters":{}}')
        big = b'{"method":"org.varlink.service.GetInterfaceDescription","parameters":{"interface":"io.tokend.TokenProvider"}}\\0'
        count = 100
        s.sendall(big * count + sys.argv[2].encode() + b"\\0")
        parent = os.getpid()
        exits = sys.argv[4] == "exit"
        if os.fork() != 0:
            if exits:
                os._exit(0)
            os.execv(named, [named, "-c", "import time; time.sleep(60)"])
        wait_for(parent, gone=exits)
        data = b""
        while data.count(b"\\0") < count + 1:
            chunk = s.recv(1 << 20)
            if not chunk:
                break
            data += chunk
        if not exits:
            os.kill(parent, signal.SIGKILL)
        sys.stdout.write(data.split(b"\\0")[count].decode())
        """

    /// Run by the named program (argv[3] is another program): connects, and leaves the
    /// connection to a child that runs the other program, which writes the call and prints the
    /// reply. With argv[4] `self`, it asks first, prints the reply and a newline, and runs the
    /// other program itself (`exec`), which asks again. With argv[4] `claim` (run as pid 1 of a pid namespace of its own, in a user
    /// namespace of its own: `unshare -Urpf`), the child stamps the call with its parent's pid,
    /// which the kernel allows whoever administers the pid namespace.
    static let callFromAProgramTheNamedProgramStarted = """
        import os, socket, sys
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(20)
        s.connect(sys.argv[1])
        s.set_inheritable(True)
        if sys.argv[4] == "self":
            s.sendall(sys.argv[2].encode() + b"\\0")
            data = b""
            while not data.endswith(b"\\0"):
                data += s.recv(65536)
            sys.stdout.write(data.rstrip(b"\\0").decode() + "\\n")
            sys.stdout.flush()
            child = 0
        else:
            child = os.fork()
        if child == 0:
            writer = '''
        import socket, struct, sys
        s = socket.socket(fileno=int(sys.argv[1]))
        s.settimeout(20)
        call = sys.argv[2].encode() + b"\\\\0"
        if sys.argv[3] == "claim":
            s.sendmsg([call], [(socket.SOL_SOCKET, socket.SCM_CREDENTIALS, struct.pack("iII", 1, 0, 0))])
        else:
            s.sendall(call)
        data = b""
        while not data.endswith(b"\\\\0"):
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        sys.stdout.write(data.rstrip(b"\\\\0").decode())
        '''
            os.execv(sys.argv[3], [sys.argv[3], "-c", writer, str(s.fileno()), sys.argv[2], sys.argv[4]])
        os.waitpid(child, 0)
        """

    /// Whether uid 65534 may make a user and pid namespace of its own here.
    static let unprivilegedPidNamespaces: Bool = {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/setpriv")
        process.arguments = ["--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/unshare", "-Urpf", "/bin/true"]
        process.standardError = FileHandle.nullDevice
        guard (try? process.run()) != nil else { return false }
        process.waitUntilExit()
        return process.terminationStatus == 0
    }()

    /// Issue 43's handover, as uid 65534: the connecting process becomes the named program
    /// (which only waits), and its child asks on the connection. The call's writer is the child.
    @Test func aChildCallingAfterTheConnectorExecedTheNamedProgramIsRefused() async throws {
        let pinned = try await Pinned.start()
        let reply = try await pinned.handover(Self.callFromAChildAfterTheConnectorExeced)
        pinned.expectRefused(reply, why: "not by the process that connected")
        try await pinned.stop()
    }

    /// The connecting process writes the call, then becomes the named program before tokend
    /// decides: the writer is the connector, but it no longer runs the file it connected as.
    @Test func aCallWrittenBeforeTheConnectorExecedTheNamedProgramIsRefused() async throws {
        let pinned = try await Pinned.start()
        let reply = try await pinned.handover(Self.callWrittenBeforeTheConnectorExeced)
        pinned.expectRefused(reply, why: "has run another executable since it connected")
        try await pinned.stop()
    }

    /// The connecting process writes the call and exits before tokend decides: its pid may name
    /// another process by then, so its facts are not read.
    @Test func aCallWhoseWriterExitedBeforeTheCheckIsRefused() async throws {
        let pinned = try await Pinned.start()
        let reply = try await pinned.handover(Self.callWrittenBeforeTheConnectorExeced, mode: "exit")
        pinned.expectRefused(reply, why: "the calling process exited")
        try await pinned.stop()
    }

    /// The named program connects, then starts another program that inherits the connection
    /// and asks on it: that program is not the one that connected.
    @Test func aProgramTheNamedProgramStartsCannotAskOnItsConnection() async throws {
        let pinned = try await Pinned.start()
        let result = try await pinned.run(
            pinned.copy,
            [
                "-c", Self.callFromAProgramTheNamedProgramStarted, pinned.daemon.socketPath, Tokens.tokenCall(user: "pinned"),
                "/usr/bin/python3.11", "plain",
            ])
        pinned.expectRefused(try Pinned.reply(result), why: "not by the process that connected")
        // The named program asking itself is granted.
        let granted = try await ProgramReaderTests.token(
            "pinned", daemon: pinned.daemon, unit: "demo.service", units: pinned.units, uid: 65534, python: pinned.copy)
        #expect(granted.accessToken != nil, "\(granted) \(pinned.daemon.log.suffix(1500))")
        try await pinned.stop()
    }

    /// The named program asks, then execs another program that keeps its connection and asks
    /// again: the same process, no longer the program that connected.
    @Test func theNamedProgramThatExecsAnotherIsRefusedFromThen() async throws {
        let pinned = try await Pinned.start()
        let result = try await pinned.run(
            pinned.copy,
            [
                "-c", Self.callFromAProgramTheNamedProgramStarted, pinned.daemon.socketPath, Tokens.tokenCall(user: "pinned"),
                "/usr/bin/python3.11", "self",
            ])
        let lines = result.stdout.split(separator: "\n", maxSplits: 1).map(String.init)
        #expect(lines.count == 2, "\(result.stdout) \(result.stderr)")
        let first = try RawClient.object(lines.first ?? "")
        #expect(first.accessToken != nil, "\(first) \(pinned.daemon.log.suffix(1500))")
        pinned.expectRefused(try RawClient.object(lines.last ?? ""), why: "has run another executable since it connected")
        try await pinned.stop()
    }

    /// A process of the named unit asks, then execs another program that keeps the connection and
    /// asks again: still the unit's process, still granted (a unit runs what it likes).
    @Test func aUnitsProcessThatExecsAnotherProgramIsStillTheUnit() async throws {
        let units = try Units()
        let daemon = try await ProgramReaderTests.daemon(credentials: [("backup", ["unit:demo.service"])])
        let result = try await ProgramReaderTests.run(
            "/usr/bin/python3",
            [
                "-c", Self.callFromAProgramTheNamedProgramStarted, daemon.socketPath, Tokens.tokenCall(user: "backup"),
                "/usr/bin/python3.11", "self",
            ], unit: "demo.service", units: units, uid: ProgramReaderTests.reader)
        let replies = try result.stdout.split(separator: "\n", maxSplits: 1).map { try RawClient.object(String($0)) }
        #expect(replies.count == 2 && replies.allSatisfy { $0.accessToken != nil }, "\(replies) \(daemon.log.suffix(1500))")
        _ = try await daemon.stop()
        await units.remove()
    }

    /// A process that administers a pid namespace (anyone who makes one in a user namespace of
    /// their own) may stamp a message with the pid of another process there: the named program
    /// connects in such a namespace, another program writes on its connection as if it were it.
    @Test(.enabled(if: unprivilegedPidNamespaces, "uid 65534 may not make user and pid namespaces here"))
    func aCallStampedWithTheConnectorsPidInANestedPidNamespaceIsRefused() async throws {
        let pinned = try await Pinned.start()
        let result = try await pinned.run(
            "/usr/bin/unshare",
            [
                "-Urpf", pinned.copy, "-c", Self.callFromAProgramTheNamedProgramStarted, pinned.daemon.socketPath,
                Tokens.tokenCall(user: "pinned"), "/usr/bin/python3.11", "claim",
            ])
        pinned.expectRefused(try Pinned.reply(result), why: "is in another pid namespace")
        try await pinned.stop()
    }

    /// In a mount namespace of its own (anyone's, with unprivileged user namespaces) a process
    /// can mount another file over the named path and run it: the kernel then shows the named
    /// path as its executable. An `exe:` reader without a hash names the file tokend finds at
    /// that path, which this one is not.
    @Test(.enabled(if: unprivilegedPidNamespaces, "uid 65534 may not make user namespaces here"))
    func anotherFileMountedOverTheNamedPathIsNotTheNamedProgram() async throws {
        let units = try Units()
        let directory = try ScratchDirectory()
        let (copy, _) = try await ProgramReaderTests.pythonCopy(in: directory)
        let daemon = try await ProgramReaderTests.daemon(credentials: [("path", ["exe:\(copy)"])])
        let script = #"mount --bind /usr/bin/python3.11 "$0" && exec "$0" -c "$1" "$2" "$3""#
        let result = try await ProgramReaderTests.run(
            "/usr/bin/unshare",
            [
                "-Urm", "/bin/sh", "-c", script, copy, ProgramReaderTests.oneCall, daemon.socketPath,
                Tokens.tokenCall(user: "path"),
            ], unit: "demo.service", units: units, uid: 65534)
        let reply = try Pinned.reply(result)
        #expect(reply.accessToken == nil && reply.errorName == ProgramReaderTests.permissionDenied, "\(reply)")
        #expect(daemon.log.contains("is not the file at that path"), "\(daemon.log.suffix(1500))")
        // The file at that path itself is granted.
        let granted = try await ProgramReaderTests.token(
            "path", daemon: daemon, unit: "demo.service", units: units, uid: 65534, python: copy)
        #expect(granted.accessToken != nil, "\(granted) \(daemon.log.suffix(1500))")
        _ = try await daemon.stop()
        await units.remove()
    }

    /// Connections accepted while no credential has a program reader are not traced (that costs
    /// every message some work): a program that connected before the first program-reader
    /// credential was added is refused for it, told to reconnect, and granted once it does.
    @Test func aConnectionOpenedBeforeAnyProgramReaderExistedIsToldToReconnect() async throws {
        let units = try Units()
        let directory = try ScratchDirectory()
        let daemon = try await ProgramReaderTests.daemon(credentials: [])
        // A folder the client may write to, for "connected".
        let signals = directory.file("signals")
        #expect(mkdir(signals, 0o755) == 0 && chmod(signals, 0o777) == 0)
        let go = signals + "/go"
        // Connects, says so, and asks once `go` exists.
        let script = """
            import os, sys, time
            \(Self.prelude)
            s = connect()
            exchange(s, b'{"method":"org.varlink.service.GetInfo","parameters":{}}')
            open(sys.argv[4] + ".connected", "w").close()
            deadline = time.time() + 20
            while not os.path.exists(sys.argv[4]) and time.time() < deadline:
                time.sleep(0.01)
            sys.stdout.write(exchange(s, sys.argv[2].encode()).decode())
            """
        let early = Task {
            try await ProgramReaderTests.run(
                "/usr/bin/python3", ["-c", script, daemon.socketPath, Tokens.tokenCall(user: "backup"), "unused", go],
                unit: "demo.service", units: units, uid: ProgramReaderTests.reader)
        }
        let deadline = ContinuousClock.now + .seconds(20)
        while !FileManager.default.fileExists(atPath: go + ".connected"), ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(10))
        }
        let root = try RawClient(path: daemon.socketPath)
        let added = try root.call(
            Tokens.addCall(user: "backup", access: Tokens.random("backup-"), refresh: nil, readers: ["unit:demo.service"]))
        #expect(added.errorName == nil, "\(added)")
        FileManager.default.createFile(atPath: go, contents: nil)
        let refused = try Pinned.reply(try await early.value)
        #expect(refused.errorName == ProgramReaderTests.permissionDenied, "\(refused)")
        #expect(daemon.log.contains("is not known (reconnect)"), "\(daemon.log.suffix(1500))")
        let granted = try await ProgramReaderTests.token(
            "backup", daemon: daemon, unit: "demo.service", units: units, uid: ProgramReaderTests.reader)
        #expect(granted.accessToken != nil, "\(granted) \(daemon.log.suffix(1500))")
        // Without program readers tracing stops; with one again it starts again.
        let remove = #"{"method":"io.tokend.TokenProvider.RemoveCredential","parameters":{"userIdentifier":"backup"}}"#
        #expect(try root.call(remove).errorName == nil)
        let again = try root.call(
            Tokens.addCall(user: "backup", access: Tokens.random("backup-"), refresh: nil, readers: ["unit:demo.service"]))
        #expect(again.errorName == nil, "\(again)")
        let grantedAgain = try await ProgramReaderTests.token(
            "backup", daemon: daemon, unit: "demo.service", units: units, uid: ProgramReaderTests.reader)
        #expect(grantedAgain.accessToken != nil, "\(grantedAgain) \(daemon.log.suffix(1500))")
        _ = try await daemon.stop()
        await units.remove()
    }

    /// The named program writes many calls at once, more than one read takes: each is traced to
    /// it and granted.
    @Test func theNamedProgramsPipelinedCallsAreEachGranted() async throws {
        let pinned = try await Pinned.start()
        let script = """
            import socket, sys
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(20)
            s.connect(sys.argv[1])
            count = 300
            s.sendall((sys.argv[2].encode() + b"\\0") * count)
            data = b""
            while data.count(b"\\0") < count:
                chunk = s.recv(1 << 20)
                if not chunk:
                    break
                data += chunk
            sys.stdout.write("\\n".join(part.decode() for part in data.split(b"\\0")[:count]))
            """
        let result = try await pinned.run(pinned.copy, ["-c", script, pinned.daemon.socketPath, Tokens.tokenCall(user: "pinned")])
        let replies = try result.stdout.split(separator: "\n").map { try RawClient.object(String($0)) }
        #expect(replies.count == 300, "\(result.stderr)")
        #expect(
            replies.allSatisfy { $0.accessToken != nil },
            "\(replies.first { $0.accessToken == nil } ?? [:]) \(pinned.daemon.log.suffix(1500))")
        try await pinned.stop()
    }
}

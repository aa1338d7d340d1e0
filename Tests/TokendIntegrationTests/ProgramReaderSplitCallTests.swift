import Foundation
import Testing
import TokendTestSupport

/// One call written by two processes: the named program writes part of it and another program,
/// sharing the connection, the rest (in either order; the kernel never returns two writers'
/// bytes in one read). The call is not the named program's own: it is refused.
@Suite(.serialized, .enabled(if: CgroupHierarchy.root != nil, "no writable cgroup v2 hierarchy (root needed)"))
struct ProgramReaderSplitCallTests {
    typealias Handover = ProgramReaderHandoverTests

    /// Run by the named program: connects, and, with argv[4] `first`, writes the first half of
    /// the call from argv[2] itself before its child (running the program in argv[3]) writes the
    /// rest; with `last`, the child writes the first half and it the rest. The reply is printed.
    static let splitCall = """
        import os, socket, sys
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(20)
        s.connect(sys.argv[1])
        s.set_inheritable(True)
        call = sys.argv[2].encode() + b"\\0"
        half = len(call) // 2
        writer = '''
        import socket, sys
        s = socket.socket(fileno=int(sys.argv[1]))
        s.sendall(bytes.fromhex(sys.argv[2]))
        '''
        def child(part):
            pid = os.fork()
            if pid == 0:
                os.execv(sys.argv[3], [sys.argv[3], "-c", writer, str(s.fileno()), part.hex()])
            os.waitpid(pid, 0)
        if sys.argv[4] == "first":
            s.sendall(call[:half])
            child(call[half:])
        else:
            child(call[:half])
            s.sendall(call[half:])
        data = b""
        while not data.endswith(b"\\0"):
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        sys.stdout.write(data.rstrip(b"\\0").decode())
        """

    @Test(arguments: ["first", "last"])
    func aCallTheNamedProgramWroteOnlyPartOfIsRefused(order: String) async throws {
        let pinned = try await Handover.Pinned.start()
        let result = try await pinned.run(
            pinned.copy,
            ["-c", Self.splitCall, pinned.daemon.socketPath, Tokens.tokenCall(user: "pinned"), "/usr/bin/python3.11", order])
        pinned.expectRefused(try Handover.Pinned.reply(result), why: "not by the process that connected")
        try await pinned.stop()
    }
}

import Foundation

/// Makes calls as another uid/gid with `setpriv` (numeric ids; nothing is added to the
/// machine's user database), through a minimal Python client so the reply's exact bytes come back.
enum OtherUser {
    /// Python: `exchange(s, call)` sends one call (bytes, without its NUL) on the socket `s`
    /// and returns the reply's bytes, without its NUL.
    static let pythonExchange = #"""
        def exchange(s, call):
            s.sendall(call + b"\0")
            data = b""
            while not data.endswith(b"\0"):
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
            return data.rstrip(b"\0")
        """#

    static let pythonClient = """
        import socket, sys
        \(pythonExchange)
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(10)
        s.connect(sys.argv[1])
        sys.stdout.write(exchange(s, sys.stdin.buffer.read()).decode())
        """

    /// Sends one call as `uid`/`gid` with `groups` as supplementary groups and returns the reply.
    static func call(_ json: String, socket: String, uid: UInt32, gid: UInt32, groups: [UInt32] = []) async throws -> [String: Any] {
        var arguments = ["--reuid=\(uid)", "--regid=\(gid)"]
        arguments += groups.isEmpty ? ["--clear-groups"] : ["--groups=\(groups.map(String.init).joined(separator: ","))"]
        arguments += ["/usr/bin/python3", "-c", pythonClient, socket]
        let result = try await runCommand("/usr/bin/setpriv", arguments, stdin: json)
        guard result.status == 0 else { throw TestFailure("client as uid \(uid) failed (\(result.status)): \(result.stderr)") }
        return try RawClient.object(result.stdout)
    }
}

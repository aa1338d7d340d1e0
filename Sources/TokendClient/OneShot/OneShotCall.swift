import Glibc
import TokendJSON
import TokendProtocol

/// One Varlink call on a connection of its own, with blocking I/O on the calling thread:
/// connect, send, read the reply, close.
///
/// For short-lived command-line tools (`tokenctl token`, credential helpers for git and
/// kubectl), where starting an event-loop group costs more than the whole round trip (a
/// process that makes one call is done before NIO's threads are up). Long-running programs use
/// ``TokendClient``, which keeps its connection and pipelines calls.
///
/// Every step is bounded by one deadline; errors are the ``TokendClientError``s
/// ``TokendClient`` throws, with the same messages.
public enum OneShotCall {
    /// ProvideTokenReplacement as ``TokendClient/credentials(for:minValidity:rejectedToken:)``,
    /// without the in-process cache (a one-shot process has none worth keeping).
    ///
    /// `administratorsSocketPath`, when given, is tried first (``TokendClient/administratorsSocketPath``).
    public static func credentials(
        socketPath: String? = nil, administratorsSocketPath: String? = nil, for userIdentifier: String, minValidity: Duration = .zero,
        rejectedToken: String? = nil, scope: String? = nil, resource: String? = nil, timeout: Duration = .seconds(10),
        maximumMessageBytes: Int = 1 << 20
    ) throws(TokendClientError) -> Credentials {
        try TokendClient.checkIdentifier(
            userIdentifier, name: "userIdentifier", method: TokenProviderMethod.provideTokenReplacement.rawValue)
        let call = TokendClient.tokenCall(
            userIdentifier, minValiditySeconds: TokendClient.wholeSecondsRoundingUp(minValidity), rejectedToken: rejectedToken,
            scope: scope, resource: resource)
        let path = socketPath ?? TokendClient.socketPath(environment: TokendClient.environmentValue(TokendClient.socketEnvironmentVariable))
        let reply = try perform(
            call, socketPath: path, administratorsSocketPath: administratorsSocketPath, timeout: timeout,
            maximumMessageBytes: maximumMessageBytes)
        if let name = reply.error {
            throw TokendClientError(varlinkErrorName: name, parameters: reply.parameters, call: call)
        }
        return try TokendClient.credentials(in: reply, of: call, for: userIdentifier)
    }

    /// ProvideDPoPProof as ``TokendClient/dpopProof(for:httpMethod:httpURI:nonce:minValidity:)``.
    public static func dpopProof(
        socketPath: String? = nil, administratorsSocketPath: String? = nil, for userIdentifier: String, httpMethod: String,
        httpURI: String, nonce: String? = nil, minValidity: Duration = .zero, timeout: Duration = .seconds(10)
    ) throws(TokendClientError) -> DPoPProof {
        let call = try TokendClient.dpopCall(
            userIdentifier, httpMethod: httpMethod, httpURI: httpURI, nonce: nonce, minValidity: minValidity)
        let path = socketPath ?? TokendClient.socketPath(environment: TokendClient.environmentValue(TokendClient.socketEnvironmentVariable))
        let reply = try perform(call, socketPath: path, administratorsSocketPath: administratorsSocketPath, timeout: timeout)
        if let name = reply.error {
            throw TokendClientError(varlinkErrorName: name, parameters: reply.parameters, call: call)
        }
        return try TokendClient.dpopProof(in: reply, of: call, for: userIdentifier)
    }

    /// Sends `call` (without `more`) and returns its one reply; through `administratorsSocketPath`
    /// when it is given and can be connected to, else through `socketPath`.
    public static func perform(
        _ call: VarlinkCall, socketPath: String, administratorsSocketPath: String? = nil, timeout: Duration,
        maximumMessageBytes: Int = 1 << 20
    ) throws(TokendClientError) -> VarlinkReply {
        let deadline = MonotonicDeadline(after: timeout)
        let socket: Int32
        if let path = administratorsSocketPath, let administrators = try? connect(path, deadline: deadline) {
            socket = administrators
        } else {
            socket = try connect(socketPath, deadline: deadline)
        }
        defer { close(socket) }
        var message: [UInt8] = []
        call.encode(into: &message)
        message.append(0)
        try send(message, on: socket, deadline: deadline, method: call.method)
        let bytes = try receive(on: socket, deadline: deadline, limit: maximumMessageBytes, method: call.method)
        do {
            return try VarlinkReply.decode(bytes)
        } catch {
            throw TokendClientError(
                code: .protocolError, message: "tokend's reply to \(call.method) is not valid: \(error)", method: call.method)
        }
    }

    // MARK: Socket steps

    private static func connect(_ path: String, deadline: MonotonicDeadline) throws(TokendClientError) -> Int32 {
        // Made printable only for a message: a successful call never needs it.
        var shown: String { Redaction.display(path, secrets: []) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let pathBytes = Array(path.utf8)
        let capacity = MemoryLayout.size(ofValue: address.sun_path)
        guard !pathBytes.isEmpty, pathBytes.count < capacity else {
            throw TokendClientError(code: .daemonUnavailable, message: "the socket path \(shown) is too long for a Unix socket")
        }
        withUnsafeMutableBytes(of: &address.sun_path) { buffer in
            buffer.copyBytes(from: pathBytes)
            buffer[pathBytes.count] = 0
        }
        let socket = Glibc.socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
        guard socket >= 0 else {
            throw TokendClientError(code: .daemonUnavailable, message: "cannot create a socket: \(String(cString: strerror(errno)))")
        }
        let length = socklen_t(MemoryLayout<sa_family_t>.size + pathBytes.count + 1)
        func attempt() -> Int32 {
            withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(socket, $0, length) }
            }
        }
        var result = attempt()
        // A Unix socket whose accept queue is full refuses at once (EAGAIN) rather than waiting
        // as TCP does: try again, backing off from 1 ms to 50 ms, until the deadline.
        var backoff: Int32 = 1
        while result != 0, errno == EAGAIN || errno == EINTR, deadline.remainingMilliseconds > Int64(backoff) {
            _ = poll(nil, 0, backoff)
            backoff = min(backoff * 2, 50)
            result = attempt()
        }
        if result == 0 { return socket }
        let code = errno
        if code == EAGAIN {
            close(socket)
            throw TokendClientError(code: .timeout, message: "connecting to tokend at \(shown) timed out: its accept queue stayed full")
        }
        if code == EINPROGRESS {
            // Not what a Unix socket does today; kept for one that completes a connect later.
            do {
                try wait(socket, for: Int16(POLLOUT), deadline: deadline, method: "connect")
            } catch {
                close(socket)
                throw TokendClientError(code: .timeout, message: "connecting to tokend at \(shown) timed out")
            }
            var socketError: Int32 = 0
            var size = socklen_t(MemoryLayout<Int32>.size)
            getsockopt(socket, SOL_SOCKET, SO_ERROR, &socketError, &size)
            if socketError == 0 { return socket }
            close(socket)
            throw connectError(socketError, shown: shown)
        }
        close(socket)
        throw connectError(code, shown: shown)
    }

    private static func connectError(_ code: Int32, shown: String) -> TokendClientError {
        switch code {
        case ENOENT, ENOTDIR:
            TokendClientError(code: .daemonUnavailable, message: "tokend is not running: there is no socket at \(shown)")
        case ECONNREFUSED:
            TokendClientError(code: .daemonUnavailable, message: "tokend is not running: nothing listens on \(shown)")
        case EACCES, EPERM:
            TokendClientError(code: .permissionDenied, message: "permission denied connecting to tokend's socket at \(shown)")
        default:
            TokendClientError(code: .daemonUnavailable, message: "cannot connect to tokend at \(shown): \(String(cString: strerror(code)))")
        }
    }

    private static func send(_ bytes: [UInt8], on socket: Int32, deadline: MonotonicDeadline, method: String) throws(TokendClientError) {
        var offset = 0
        while offset < bytes.count {
            let written = bytes.withUnsafeBytes { Glibc.send(socket, $0.baseAddress! + offset, $0.count - offset, Int32(MSG_NOSIGNAL)) }
            if written > 0 {
                offset += written
            } else if written < 0, errno == EAGAIN || errno == EINTR {
                try wait(socket, for: Int16(POLLOUT), deadline: deadline, method: method)
            } else {
                throw TokendClientError(code: .daemonUnavailable, message: "the connection to tokend was closed")
            }
        }
    }

    private static func receive(on socket: Int32, deadline: MonotonicDeadline, limit: Int, method: String) throws(TokendClientError)
        -> [UInt8]
    {
        var message: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 16 * 1024)
        while true {
            let count = chunk.withUnsafeMutableBytes { recv(socket, $0.baseAddress, $0.count, 0) }
            if count > 0 {
                if let end = chunk[..<count].firstIndex(of: 0) {
                    message += chunk[..<end]
                    return message
                }
                message += chunk[..<count]
                if message.count > limit {
                    throw TokendClientError(
                        code: .protocolError, message: "tokend's reply to \(method) is longer than \(limit) bytes", method: method)
                }
            } else if count < 0, errno == EAGAIN || errno == EINTR {
                try wait(socket, for: Int16(POLLIN), deadline: deadline, method: method)
            } else {
                throw TokendClientError(code: .daemonUnavailable, message: "the connection to tokend was closed")
            }
        }
    }

    /// Waits until `socket` is ready for `events`, or throws `timeout` at the deadline.
    private static func wait(_ socket: Int32, for events: Int16, deadline: MonotonicDeadline, method: String) throws(TokendClientError) {
        while true {
            let remaining = deadline.remainingMilliseconds
            guard remaining > 0 else {
                throw TokendClientError(code: .timeout, message: "tokend did not answer \(method) in time", method: method)
            }
            var descriptor = pollfd(fd: socket, events: events, revents: 0)
            let ready = poll(&descriptor, 1, Int32(min(remaining, Int64(Int32.max))))
            if ready > 0 { return }
            if ready < 0, errno != EINTR {
                throw TokendClientError(
                    code: .daemonUnavailable, message: "the connection to tokend failed: \(String(cString: strerror(errno)))")
            }
        }
    }
}

/// A point on the monotonic clock.
struct MonotonicDeadline {
    private let end: Int64

    init(after duration: Duration) {
        let (seconds, attoseconds) = duration.components
        let milliseconds = seconds < 0 ? 0 : min(seconds, Int64(Int32.max)) * 1000 + attoseconds / 1_000_000_000_000_000
        end = Self.nowMilliseconds() + milliseconds
    }

    var remainingMilliseconds: Int64 { end - Self.nowMilliseconds() }

    private static func nowMilliseconds() -> Int64 {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return Int64(time.tv_sec) * 1000 + Int64(time.tv_nsec) / 1_000_000
    }
}

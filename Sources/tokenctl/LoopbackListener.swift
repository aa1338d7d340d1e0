import TokenctlSupport
import TokendClient

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// A one-shot HTTP listener on 127.0.0.1 for a login's redirect (RFC 8252 §7.3). It answers
/// stray requests (a favicon) and stops at the first request to the redirect path, whose
/// connection stays open so the browser can be told how the login ended.
final class LoopbackListener {
    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    let port: Int
    private var descriptor: Int32

    /// Listens on 127.0.0.1:`port` (0: a free port).
    init(port: Int) throws(Failure) {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard descriptor >= 0 else { throw Failure(description: "cannot open a socket for the login redirect") }
        var yes: Int32 = 1
        setsockopt(descriptor, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, length) }
        }
        guard bound == 0, listen(descriptor, 8) == 0 else {
            let reason = String(cString: strerror(errno))
            Glibc.close(descriptor)
            throw Failure(description: "cannot listen on 127.0.0.1:\(port) for the login redirect: \(reason)")
        }
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(descriptor, $0, &length) }
        }
        self.descriptor = descriptor
        self.port = Int(UInt16(bigEndian: address.sin_port))
    }

    deinit { close() }

    func close() {
        if descriptor >= 0 { Glibc.close(descriptor) }
        descriptor = -1
    }

    /// Waits until `deadline` (seconds since the epoch) for the redirect `rule` accepts.
    /// - Returns: the request target (path and query) and the open connection to answer on.
    /// - Throws: when the deadline passes or the redirect does not belong to this login.
    func waitForRedirect(_ rule: LoopbackRedirect, deadline: Int64) throws(Failure) -> (target: String, connection: Int32) {
        // Bounded: a page that keeps requesting things cannot keep tokenctl here forever.
        for _ in 0..<64 {
            let remaining = deadline - Int64(time(nil))
            guard remaining > 0 else { throw Failure(description: "no redirect arrived before the login expired") }
            var entry = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
            let ready = poll(&entry, 1, Int32(min(remaining, 3600) * 1000))
            if ready < 0, errno == EINTR { continue }
            guard ready > 0 else { continue }
            let connection = accept(descriptor, nil, nil)
            guard connection >= 0 else { continue }
            var timeout = timeval(tv_sec: 5, tv_usec: 0)
            setsockopt(connection, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            guard let head = Self.readHead(connection) else {
                Self.respond(connection, status: 400, body: "Bad request.")
                continue
            }
            switch rule.judge(head: head) {
            case .ignore(let status):
                Self.respond(connection, status: status, body: "Not the login redirect.")
            case .reject(let reason):
                Self.respond(connection, status: 400, body: "tokenctl refused this redirect: \(reason).")
                throw Failure(description: reason)
            case .redirect(let target):
                return (target, connection)
            }
        }
        throw Failure(description: "too many requests reached the login listener without the redirect")
    }

    /// Reads a request head (up to the blank line), at most 16 KiB.
    private static func readHead(_ connection: Int32) -> String? {
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while bytes.count < 16384 {
            let count = read(connection, &buffer, buffer.count)
            guard count > 0 else { return nil }
            bytes += buffer[0..<count]
            if let text = String(validating: bytes, as: UTF8.self), text.contains("\r\n\r\n") { return text }
        }
        return nil
    }

    /// Answers with a small text page and closes the connection.
    static func respond(_ connection: Int32, status: Int, body: String) {
        let reason = [200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed"][status] ?? "Error"
        let payload = Array((body + "\n").utf8)
        let head =
            "HTTP/1.1 \(status) \(reason)\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: \(payload.count)\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n"
        let bytes = Array(head.utf8) + payload
        bytes.withUnsafeBytes { raw in
            var offset = 0
            while offset < raw.count {
                let written = send(connection, raw.baseAddress! + offset, raw.count - offset, Int32(MSG_NOSIGNAL))
                if written <= 0 { break }
                offset += written
            }
        }
        Glibc.close(connection)
    }
}

import Foundation

/// A deliberately plain Unix-socket client for sending exact bytes (malformed, oversized,
/// pipelined) and reading NUL-terminated replies, with timeouts.
final class RawClient {
    let fd: Int32

    init(path: String) throws {
        fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw TestFailure("socket() failed") }
        var timeout = timeval(tv_sec: 10, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        guard Self.connect(fd, path) == 0 else {
            close(fd)
            throw TestFailure("connect(\(path)) failed: errno \(errno)")
        }
    }

    deinit { close(fd) }

    static func connect(_ fd: Int32, _ path: String) -> Int32 {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: path.utf8.prefix(raw.count - 1))
        }
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
    }

    static func canConnect(_ path: String) -> Bool {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        return connect(fd, path) == 0
    }

    func send(_ bytes: [UInt8]) throws {
        var offset = 0
        while offset < bytes.count {
            let n = bytes[offset...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard n > 0 else { throw TestFailure("send failed: errno \(errno)") }
            offset += n
        }
    }

    func send(_ text: String, terminate: Bool = true) throws {
        try send(Array(text.utf8) + (terminate ? [0] : []))
    }

    private var buffer: [UInt8] = []

    /// The next NUL-terminated message, or nil when the daemon closed the connection.
    func receive() throws -> String? {
        while true {
            if let nul = buffer.firstIndex(of: 0) {
                let message = String(decoding: buffer[..<nul], as: UTF8.self)
                buffer.removeSubrange(...nul)
                return message
            }
            var chunk = [UInt8](repeating: 0, count: 65536)
            let n = recv(fd, &chunk, chunk.count, 0)
            if n == 0 { return nil }
            if n < 0 {
                if errno == ECONNRESET { return nil }
                throw TestFailure("recv failed or timed out: errno \(errno)")
            }
            buffer.append(contentsOf: chunk[..<n])
        }
    }

    /// Sends one call and returns its reply as a JSON object.
    func call(_ json: String) throws -> [String: Any] {
        try send(json)
        guard let reply = try receive() else { throw TestFailure("connection closed instead of a reply") }
        return try Self.object(reply)
    }

    static func object(_ text: String) throws -> [String: Any] {
        guard let object = try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any] else {
            throw TestFailure("not a JSON object: \(text)")
        }
        return object
    }
}

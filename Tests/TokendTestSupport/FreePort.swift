import Foundation

#if canImport(Glibc)
    import Glibc
#endif

// Part of TokendTestSupport, the helpers every test target shares.

/// Loopback ports for test servers.
public enum FreePort {
    public struct Failure: Error, CustomStringConvertible {
        public let description: String
        public init(description: String) { self.description = description }
    }

    /// A port the kernel considers free now (bound to 127.0.0.1:0 and released).
    public static func pick() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        return try bindLoopback(fd)
    }

    /// A TCP socket listening on 127.0.0.1 at a port the kernel chose; the caller closes it.
    /// Nothing accepts on it: connections wait in the backlog, a server that never answers.
    public static func listen(backlog: Int32 = 128) throws -> (fd: Int32, port: Int) {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        do {
            let port = try bindLoopback(fd)
            guard Glibc.listen(fd, backlog) == 0 else { throw Failure(description: "listen failed: errno \(errno)") }
            return (fd, port)
        } catch {
            close(fd)
            throw error
        }
    }

    /// Binds `fd` to 127.0.0.1 at a port the kernel picks and returns the port.
    private static func bindLoopback(_ fd: Int32) throws -> Int {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) } }
        guard bound == 0 else { throw Failure(description: "cannot bind a loopback port: errno \(errno)") }
        _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) } }
        return Int(UInt16(bigEndian: address.sin_port))
    }

    /// Whether something accepts TCP connections on 127.0.0.1:`port`.
    public static func isListening(_ port: Int) -> Bool {
        guard let fd = connectLoopback(port) else { return false }
        close(fd)
        return true
    }

    /// A TCP socket connected to 127.0.0.1:`port` (the caller closes it), or nil with errno set.
    public static func connectLoopback(_ port: Int) -> Int32? {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return nil }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = UInt16(port).bigEndian
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else {
            let saved = errno
            close(fd)
            errno = saved
            return nil
        }
        return fd
    }
}

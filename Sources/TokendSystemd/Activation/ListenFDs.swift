import CSystemd

#if canImport(Glibc)
    import Glibc
#endif

/// Sockets passed by the service manager (socket activation, `sd_listen_fds(3)`).
public struct ListenFDs: Sendable, Hashable {
    /// The first passed descriptor (`SD_LISTEN_FDS_START`).
    public static let firstDescriptor: Int32 = 3

    /// The passed descriptors, starting at 3.
    public var descriptors: [Int32]
    /// Their names from `LISTEN_FDNAMES` (`FileDescriptorName=` in the socket unit), when given.
    public var names: [String]

    /// - Parameters:
    ///   - descriptors: The passed descriptors.
    ///   - names: Their names, possibly empty.
    public init(descriptors: [Int32], names: [String] = []) {
        self.descriptors = descriptors
        self.names = names
    }

    /// What the environment says was passed to process `pid`, by the rules of `sd_listen_fds`:
    /// `LISTEN_PID` must be `pid` (variables meant for a parent are ignored), and `LISTEN_FDS`
    /// a positive count.
    ///
    /// - Parameters:
    ///   - environment: The process environment.
    ///   - pid: This process's id.
    /// - Returns: The passed sockets, or `nil` when none were passed to this process.
    public static func parse(environment: [String: String], pid: Int32) -> ListenFDs? {
        guard let pidText = environment["LISTEN_PID"], let listenPID = Int32(pidText), listenPID == pid else {
            return nil
        }
        guard let countText = environment["LISTEN_FDS"], let count = Int32(countText), count > 0, count < 4096 else {
            return nil
        }
        let names =
            environment["LISTEN_FDNAMES"].map {
                $0.split(separator: ":", omittingEmptySubsequences: false).map(String.init)
            } ?? []
        return ListenFDs(
            descriptors: Array(firstDescriptor..<(firstDescriptor + count)),
            names: names.count == Int(count) ? names : [])
    }

    /// Takes the sockets passed to this process through `sd_listen_fds(1)`, which also removes
    /// the `LISTEN_*` variables so that child processes do not inherit them, and marks the
    /// descriptors close-on-exec.
    ///
    /// - Returns: The passed sockets, or `nil` when none were passed (or `LISTEN_PID` names
    ///   another process).
    /// - Throws: `ListenFDsError` when the variables are malformed.
    public static func take() throws(ListenFDsError) -> ListenFDs? {
        let names = getenv("LISTEN_FDNAMES").map { String(cString: $0) }
        let count = sd_listen_fds(1)
        if count < 0 { throw ListenFDsError(errno: -count) }
        guard count > 0 else { return nil }
        let split = names?.split(separator: ":", omittingEmptySubsequences: false).map(String.init) ?? []
        return ListenFDs(
            descriptors: Array(firstDescriptor..<(firstDescriptor + count)),
            names: split.count == Int(count) ? split : [])
    }

    /// Whether `descriptor` is a listening Unix stream socket (`sd_is_socket_unix(3)`).
    public static func isListeningUnixStreamSocket(_ descriptor: Int32) -> Bool {
        sd_is_socket_unix(descriptor, Int32(SOCK_STREAM.rawValue), 1, nil, 0) > 0
    }

    /// The filesystem path a Unix socket is bound to, if any (for log lines).
    public static func boundPath(of descriptor: Int32) -> String? {
        var address = sockaddr_un()
        var length = socklen_t(MemoryLayout<sockaddr_un>.size)
        let result = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(descriptor, $0, &length) }
        }
        guard result == 0, address.sun_family == sa_family_t(AF_UNIX) else { return nil }
        let pathLength = Int(length) - MemoryLayout.offset(of: \sockaddr_un.sun_path)!
        guard pathLength > 0 else { return nil }
        return withUnsafeBytes(of: &address.sun_path) { raw in
            let bytes = raw.prefix(pathLength)
            if bytes.first == 0 { return "@" + String(decoding: bytes.dropFirst().prefix { $0 != 0 }, as: UTF8.self) }
            return String(decoding: bytes.prefix { $0 != 0 }, as: UTF8.self)
        }
    }
}

/// `LISTEN_FDS`/`LISTEN_PID` could not be used.
public struct ListenFDsError: Error, CustomStringConvertible {
    /// The error number `sd_listen_fds` reported.
    public let errno: Int32

    public var description: String {
        "the sockets passed by the service manager cannot be used: \(String(cString: strerror(errno)))"
    }
}

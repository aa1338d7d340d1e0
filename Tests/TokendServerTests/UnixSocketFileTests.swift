import Foundation
import Testing

@testable import TokendServer

#if canImport(Glibc)
    import Glibc
#endif

/// A socket file appears with its final mode or not at all: a client of another uid connecting
/// while tokend starts never finds the socket with the umask's mode (`EACCES`).
@Suite struct UnixSocketFileTests {
    /// What `path` looked like when the socket had just been bound.
    struct Seen: Equatable {
        var exists: Bool
        var mode: mode_t
    }

    /// A plain listening socket bound at `path`; the descriptor.
    static func listen(at path: String) throws -> CInt {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        let bound = withAddress(path) { Glibc.bind(fd, $0, $1) }
        guard bound == 0, Glibc.listen(fd, 8) == 0 else {
            close(fd)
            throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO)
        }
        return fd
    }

    /// Calls `body` with `path` as a Unix socket address and its length.
    static func withAddress(_ path: String, _ body: (UnsafePointer<sockaddr>, socklen_t) -> CInt) -> CInt {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: path.utf8)
            raw[path.utf8.count] = 0
        }
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
    }

    /// Binds through ``UnixSocketFile`` and notes what `path` looked like right after the bind.
    static func bindObserving(path: String, mode: mode_t) async throws -> (CInt, Seen?) {
        var seen: Seen?
        let fd = try await UnixSocketFile.bind(
            path: path, mode: mode,
            bind: { bindPath in
                let fd = try listen(at: bindPath)
                seen = look(at: path)
                return fd
            },
            close: { close($0) })
        return (fd, seen)
    }

    static func look(at path: String) -> Seen {
        var info = stat()
        guard lstat(path, &info) == 0 else { return Seen(exists: false, mode: 0) }
        return Seen(exists: true, mode: info.st_mode & 0o7777)
    }

    static func directory() throws -> String {
        var template = Array("/tmp/tokend-socket-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { throw POSIXError(.EIO) }
        return String(cString: made)
    }

    @Test(arguments: [0o666 as mode_t, 0o660, 0o600])
    func theSocketAppearsWithItsModeInOneStep(mode: mode_t) async throws {
        let directory = try Self.directory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = directory + "/tokend.sock"
        // A file a daemon left between its bind and its rename is replaced.
        let leftover = try Self.listen(at: try #require(UnixSocketFile.temporaryPath(for: path)))
        close(leftover)

        let (fd, seenWhenBound) = try await Self.bindObserving(path: path, mode: mode)
        defer { close(fd) }
        // Bound, reachable by nobody yet at `path`: a bind at `path` then a chmod is seen here
        // with the umask's mode.
        #expect(seenWhenBound == Seen(exists: false, mode: 0))
        #expect(Self.look(at: path) == Seen(exists: true, mode: mode))
        #expect(!Self.look(at: UnixSocketFile.temporaryPath(for: path)!).exists)
        // The renamed file is the listening socket.
        let client = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(client) }
        let connected = Self.withAddress(path) { connect(client, $0, $1) }
        #expect(connected == 0)
    }

    @Test func temporaryNamesStayInTheDirectoryAndFitASocketAddress() {
        #expect(UnixSocketFile.temporaryPath(for: "/run/tokend/tokend.sock") == "/run/tokend/.tokend.sock.binding")
        #expect(UnixSocketFile.temporaryPath(for: "relative") == nil)
        #expect(UnixSocketFile.temporaryPath(for: "/run/tokend/") == nil)
        let longest = "/" + String(repeating: "d", count: 80) + "/" + String(repeating: "s", count: UnixSocketFile.maximumPathBytes - 82)
        #expect(longest.utf8.count == UnixSocketFile.maximumPathBytes)
        #expect(UnixSocketFile.temporaryPath(for: longest) == nil)
        let fits = "/" + String(repeating: "d", count: 80) + "/s.sock"
        #expect(UnixSocketFile.temporaryPath(for: fits)?.utf8.count ?? .max <= UnixSocketFile.maximumPathBytes)
    }

    /// A path with no room for the temporary name is bound in place, and still gets its mode.
    @Test func aPathWithNoRoomForATemporaryNameIsBoundInPlace() async throws {
        let directory = try Self.directory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = directory + "/" + String(repeating: "s", count: UnixSocketFile.maximumPathBytes - directory.utf8.count - 1)
        #expect(UnixSocketFile.temporaryPath(for: path) == nil)
        let (fd, seenWhenBound) = try await Self.bindObserving(path: path, mode: 0o666)
        defer { close(fd) }
        // The window the temporary name closes: bound in place, the socket is there before its
        // mode is set (with the umask's mode; a client of another uid gets EACCES).
        #expect(seenWhenBound?.exists == true)
        #expect(Self.look(at: path) == Seen(exists: true, mode: 0o666))
    }
}

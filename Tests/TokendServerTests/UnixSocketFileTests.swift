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

    /// Binds through ``UnixSocketFile`` and notes what `path` and the private directory looked
    /// like right after the bind.
    static func listenObserving(path: String, mode: mode_t) throws -> (UnixSocketFile.Placed, Seen?, Seen?) {
        var seen: Seen?
        var privateDirectory: Seen?
        let placed = try UnixSocketFile.listen(at: path, mode: mode, backlog: 8) { directory in
            seen = look(at: path)
            privateDirectory = look(at: directory)
        }
        return (placed, seen, privateDirectory)
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

    /// The names in `directory`.
    static func names(_ directory: String) -> [String] { (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? [] }

    @Test(arguments: [0o666 as mode_t, 0o660, 0o600])
    func theSocketAppearsWithItsModeInOneStep(mode: mode_t) throws {
        let directory = try Self.directory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = directory + "/tokend.sock"
        let (placed, seenWhenBound, privateDirectory) = try Self.listenObserving(path: path, mode: mode)
        defer { close(placed.descriptor) }
        // Bound, reachable by nobody yet at `path`, in a directory closed to others: a bind at
        // `path` then a chmod is seen here with the umask's mode.
        #expect(seenWhenBound == Seen(exists: false, mode: 0))
        #expect(privateDirectory == Seen(exists: true, mode: 0o700))
        #expect(Self.look(at: path) == Seen(exists: true, mode: mode))
        #expect(Self.names(directory) == ["tokend.sock"], "the private directory is gone")
        // The renamed file is the listening socket, and the file the daemon removes at stop.
        let client = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(client) }
        let connected = Self.withAddress(path) { connect(client, $0, $1) }
        #expect(connected == 0)
        placed.file.remove()
        #expect(!Self.look(at: path).exists)
    }

    @Test func pathsAreSplitIntoTheirDirectoryAndName() {
        #expect(UnixSocketFile.split("/run/tokend/io.tokend") == ("/run/tokend", "io.tokend"))
        #expect(UnixSocketFile.split("/io.tokend") == ("/", "io.tokend"))
        #expect(UnixSocketFile.split("relative") == (".", "relative"))
    }

    /// The longest path a client can connect to is bound the same way (the bind goes through
    /// `/proc/self/fd/N/`, whatever the directory's length); a longer one is refused by name.
    @Test func theLongestReachablePathIsBoundAndALongerOneRefused() throws {
        let directory = try Self.directory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = directory + "/" + String(repeating: "s", count: UnixSocketFile.maximumPathBytes - directory.utf8.count - 1)
        #expect(path.utf8.count == UnixSocketFile.maximumPathBytes)
        let (placed, seenWhenBound, _) = try Self.listenObserving(path: path, mode: 0o666)
        defer { close(placed.descriptor) }
        #expect(seenWhenBound == Seen(exists: false, mode: 0))
        #expect(Self.look(at: path) == Seen(exists: true, mode: 0o666))
        #expect(throws: ListenerError.self) { try UnixSocketFile.listen(at: path + "x", mode: 0o666, backlog: 8) }
    }

    /// A private directory a daemon that died mid-bind left is removed with its socket; one
    /// another uid made under such a name, and a link, are left alone.
    @Test func leftoversAreRemovedOnlyWhenTheyAreOurOwn() throws {
        let (root, shared, target) = try Self.sharedDirectory()
        defer { try? FileManager.default.removeItem(atPath: root) }
        let prefix = shared + "/" + UnixSocketFile.privateDirectoryPrefix(for: "tokend.sock")
        mkdir(prefix + "ours", 0o700)
        close(try Self.listen(at: prefix + "ours/" + UnixSocketFile.boundName))
        try Self.asAnotherUser("/bin/mkdir", [prefix + "theirs"])
        try Self.asAnotherUser("/bin/ln", ["-s", root, prefix + "link"])
        let placed = try UnixSocketFile.listen(at: shared + "/tokend.sock", mode: 0o666, backlog: 8)
        defer { close(placed.descriptor) }
        let left = Set(Self.names(shared))
        #expect(
            left == [
                "tokend.sock", UnixSocketFile.privateDirectoryPrefix(for: "tokend.sock") + "theirs",
                UnixSocketFile.privateDirectoryPrefix(for: "tokend.sock") + "link",
            ], "\(left)")
        #expect(Self.look(at: target) == Seen(exists: true, mode: 0o600))
        #expect(Self.look(at: root).exists)
    }

    /// What another user can do in a directory it may write (no sticky bit): move every name but
    /// `keep` aside and put a link to `target` in its place.
    static let attack = """
        import os, sys
        directory, target, keep = sys.argv[1], sys.argv[2], sys.argv[3]
        for name in os.listdir(directory):
            if name == keep or name.endswith(".moved"):
                continue
            path = os.path.join(directory, name)
            os.rename(path, path + ".moved")
            os.symlink(target, path)
        """

    /// Runs `command` as uid/gid 65534, synchronously, and expects it to succeed.
    static func asAnotherUser(_ command: String, _ arguments: [String]) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/setpriv")
        process.arguments = ["--reuid=65534", "--regid=65534", "--clear-groups", command] + arguments
        try process.run()
        process.waitUntilExit()
        #expect(process.terminationStatus == 0, "\(command) \(arguments) as uid 65534")
    }

    /// Runs ``attack`` as uid 65534 on `directory`.
    static func attackAsAnotherUser(_ directory: String, target: String, keep: String) throws {
        try asAnotherUser("/usr/bin/python3", ["-c", attack, directory, target, keep])
    }

    /// A directory others may write, holding the socket, and a root-only file beside it.
    static func sharedDirectory() throws -> (root: String, shared: String, target: String) {
        let root = try directory()
        chmod(root, 0o755)
        let shared = root + "/shared"
        mkdir(shared, 0o777)
        chmod(shared, 0o777)
        let target = root + "/root-only"
        try "root's file\n".write(toFile: target, atomically: true, encoding: .utf8)
        chmod(target, 0o600)
        return (root, shared, target)
    }

    /// Another uid replaces every name in the socket's (world-writable) directory with a link to
    /// a root-only file right after the bind: the file keeps its mode, and the socket is in place.
    @Test func anotherUserActingRightAfterTheBindChangesNothingElsewhere() throws {
        let (root, shared, target) = try Self.sharedDirectory()
        defer { try? FileManager.default.removeItem(atPath: root) }
        let path = shared + "/tokend.sock"
        var attacked: [String] = []
        let placed = try UnixSocketFile.listen(at: path, mode: 0o666, backlog: 8) { _ in
            try? Self.attackAsAnotherUser(shared, target: target, keep: "tokend.sock")
            attacked = Self.names(shared)
        }
        defer { close(placed.descriptor) }
        #expect(attacked.contains { $0.hasSuffix(".moved") }, "the attack found the private directory: \(attacked)")
        #expect(Self.look(at: target) == Seen(exists: true, mode: 0o600), "the root-only file was not chmodded")
        var info = stat()
        #expect(lstat(path, &info) == 0 && (info.st_mode & S_IFMT) == S_IFSOCK && info.st_mode & 0o777 == 0o666)
        // The link the attacker put in the private directory's place is theirs, left alone.
        #expect(
            Self.names(shared).contains {
                $0.hasPrefix(UnixSocketFile.privateDirectoryPrefix(for: "tokend.sock")) && !$0.hasSuffix(".moved")
            })
        let client = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(client) }
        #expect(Self.withAddress(path) { connect(client, $0, $1) } == 0)
    }

    /// A link or a directory another uid put where tokend once bound (`.NAME.binding`), or under
    /// a name of the private directories' form, is neither followed nor in the way.
    @Test func plantedNamesAreNeitherFollowedNorInTheWay() throws {
        let (root, shared, target) = try Self.sharedDirectory()
        defer { try? FileManager.default.removeItem(atPath: root) }
        try Self.asAnotherUser("/bin/ln", ["-s", target, shared + "/.tokend.sock.binding"])
        try Self.asAnotherUser("/bin/mkdir", [shared + "/" + UnixSocketFile.privateDirectoryPrefix(for: "tokend.sock") + "x"])
        let placed = try UnixSocketFile.listen(at: shared + "/tokend.sock", mode: 0o660, backlog: 8)
        defer { close(placed.descriptor) }
        #expect(Self.look(at: target) == Seen(exists: true, mode: 0o600))
        #expect(Self.look(at: shared + "/tokend.sock") == Seen(exists: true, mode: 0o660))
        #expect(
            Set(Self.names(shared)).isSuperset(of: [
                ".tokend.sock.binding", UnixSocketFile.privateDirectoryPrefix(for: "tokend.sock") + "x",
            ]))
    }
}

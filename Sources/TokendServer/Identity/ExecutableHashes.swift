import Synchronization
import TokendStorage

#if canImport(Glibc)
    import Glibc
#endif

/// The sha256 of executables, kept per version of a file so that one is read once while it is
/// unchanged.
///
/// A version is the file's device, inode, size, modification time and inode change time
/// (ctime). Its owner can rewrite it in place with the same size and set the modification time
/// back (`touch -d`), but not the change time: every write and every `utimensat` sets it to the
/// current time. Timestamps are coarse (a clock tick, a second on some file systems), so a file
/// changed twice within one tick would keep its change time: a hash is kept only once the change
/// time is at least ``settledSeconds`` in the past, after which any further change moves it.
enum ExecutableHashes {
    /// What identifies one version of a file's contents.
    struct FileVersion: Hashable {
        var device: UInt64
        var inode: UInt64
        var size: Int
        var modified: FileTime
        var changed: FileTime

        init(_ info: stat) {
            device = UInt64(info.st_dev)
            inode = UInt64(info.st_ino)
            size = Int(info.st_size)
            modified = FileTime(info.st_mtim)
            changed = FileTime(info.st_ctim)
        }
    }

    /// Seconds and nanoseconds, as `stat` and `clock_gettime(CLOCK_REALTIME)` give them.
    struct FileTime: Hashable, Comparable {
        var seconds: Int
        var nanoseconds: Int

        init(seconds: Int, nanoseconds: Int = 0) {
            self.seconds = seconds
            self.nanoseconds = nanoseconds
        }

        init(_ time: timespec) {
            self.init(seconds: Int(time.tv_sec), nanoseconds: Int(time.tv_nsec))
        }

        static func < (lhs: Self, rhs: Self) -> Bool {
            (lhs.seconds, lhs.nanoseconds) < (rhs.seconds, rhs.nanoseconds)
        }
    }

    /// How long after its last change a file's hash may be kept.
    static let settledSeconds = 2
    static let maximumCachedHashes = 1024
    private static let hashes = Mutex<[FileVersion: String]>([:])

    /// Whether a hash of `version` may be kept at `now`: its change time is far enough in the
    /// past that a later change cannot share it (and not in the future).
    static func isSettled(_ version: FileVersion, now: FileTime) -> Bool {
        version.changed < FileTime(seconds: now.seconds - settledSeconds, nanoseconds: now.nanoseconds)
    }

    /// The sha256 of the open file `fd`, at most `limit` bytes; kept for its version when that is
    /// settled at `now` and did not change while it was read.
    static func sha256(of fd: Int32, limit: Int, now: FileTime) -> Result<String, FileDigest.Failure> {
        var info = stat()
        guard fstat(fd, &info) == 0 else { return .failure(.readFailed(errno: errno)) }
        guard Int(info.st_size) <= limit else { return .failure(.tooLarge(limit: limit)) }
        let version = FileVersion(info)
        if let known = hashes.withLock({ $0[version] }) { return .success(known) }
        let result = FileDigest.sha256(of: fd, limit: limit)
        guard case .success(let hex) = result, isSettled(version, now: now) else { return result }
        // Written to while it was read: what was hashed may be neither version.
        guard fstat(fd, &info) == 0, FileVersion(info) == version else { return result }
        hashes.withLock { cache in
            if cache.count >= maximumCachedHashes { cache.removeAll() }
            cache[version] = hex
        }
        return result
    }

    /// The current time, for ``sha256(of:limit:now:)``.
    static func now() -> FileTime {
        var time = timespec()
        clock_gettime(CLOCK_REALTIME, &time)
        return FileTime(time)
    }

    /// Forgets every hash (for tests).
    static func removeAll() {
        hashes.withLock { $0.removeAll() }
    }
}

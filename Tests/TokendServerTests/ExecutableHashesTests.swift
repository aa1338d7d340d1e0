import Foundation
import Testing

@testable import TokendServer

#if canImport(Glibc)
    import Glibc
#endif

/// The executables' hash cache (``ExecutableHashes``): a version of a file is what its owner
/// cannot set back.
@Suite(.serialized)
struct ExecutableHashesTests {
    /// A file in a scratch folder, opened for reading and writing.
    final class ScratchFile {
        let path: String
        let fd: Int32

        init(_ contents: String) throws {
            path = FileManager.default.temporaryDirectory.appendingPathComponent("tokend-hash-\(UUID().uuidString)").path
            fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
            guard fd >= 0 else { throw POSIXError(.init(rawValue: errno) ?? .EIO) }
            write(contents)
        }

        deinit {
            close(fd)
            unlink(path)
        }

        func write(_ contents: String) {
            let written = Array(contents.utf8).withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, 0) }
            #expect(written == contents.utf8.count)
        }

        var info: stat {
            var info = stat()
            #expect(fstat(fd, &info) == 0)
            return info
        }
    }

    /// `sha256sum` of each text used here (computed outside tokend).
    static func sha256(_ text: String) -> String {
        [
            "the program as it was": "b868f88f1526a2fa60ce0e68bc86752ea89a8f8cb3cad11fea579a6107138bbc",
            "the program, changed!": "3d0b20bd64743eaeb0b58fe9ecd998b7cbbb1cda926bc4b28927a9997525fbe4",
            "unchanged": "aaa8d3c8d74ad3e8f6b1772aa9c7e0eaa528cb42fc93599ce2f125b00d4c424c",
            "just written": "4ee614141387f4e8f15bb314eb1245f5e5cefc5c3f21ede9c81742b4e27c9bb5",
        ][text]!
    }

    /// Waits (bounded) until the coarse clock file times come from has passed `time`, so that the
    /// next change gets a later change time on any kernel.
    static func waitForTheClock(toPass time: timespec) async throws {
        let deadline = ContinuousClock.now + .seconds(10)
        while ContinuousClock.now < deadline {
            var now = timespec()
            clock_gettime(CLOCK_REALTIME_COARSE, &now)
            if (now.tv_sec, now.tv_nsec) > (time.tv_sec, time.tv_nsec) { return }
            try await Task.sleep(for: .milliseconds(5))
        }
        Issue.record("the clock did not pass the file's change time")
    }

    /// Long after its last change, so that the hash of the first version is kept.
    static func later(than info: stat) -> ExecutableHashes.FileTime {
        ExecutableHashes.FileTime(seconds: Int(info.st_ctim.tv_sec) + 100)
    }

    @Test func aFileRewrittenInPlaceWithItsOldTimesIsHashedAgain() async throws {
        ExecutableHashes.removeAll()
        let file = try ScratchFile("the program as it was")
        let before = file.info
        let now = Self.later(than: before)
        let first = ExecutableHashes.sha256(of: file.fd, limit: 1 << 20, now: now)
        #expect(first == .success(Self.sha256("the program as it was")))
        try await Self.waitForTheClock(toPass: before.st_ctim)
        // Same inode, same size, and the old access and modification times put back.
        file.write("the program, changed!")
        var times = [before.st_atim, before.st_mtim]
        #expect(futimens(file.fd, &times) == 0)
        let after = file.info
        #expect(after.st_ino == before.st_ino && after.st_size == before.st_size)
        #expect((after.st_mtim.tv_sec, after.st_mtim.tv_nsec) == (before.st_mtim.tv_sec, before.st_mtim.tv_nsec))
        let second = ExecutableHashes.sha256(of: file.fd, limit: 1 << 20, now: now)
        #expect(second == .success(Self.sha256("the program, changed!")))
    }

    @Test func anUnchangedSettledFileIsReadOnce() throws {
        ExecutableHashes.removeAll()
        let file = try ScratchFile("unchanged")
        let now = Self.later(than: file.info)
        #expect(ExecutableHashes.sha256(of: file.fd, limit: 1 << 20, now: now) == .success(Self.sha256("unchanged")))
        // Unreadable now (write-only descriptor on the same file): only the cache can answer.
        let writeOnly = open(file.path, O_WRONLY | O_CLOEXEC)
        defer { close(writeOnly) }
        #expect(ExecutableHashes.sha256(of: writeOnly, limit: 1 << 20, now: now) == .success(Self.sha256("unchanged")))
    }

    @Test func aRecentlyChangedFileIsHashedEachTime() throws {
        ExecutableHashes.removeAll()
        let file = try ScratchFile("just written")
        let now = ExecutableHashes.FileTime(file.info.st_ctim)
        #expect(ExecutableHashes.sha256(of: file.fd, limit: 1 << 20, now: now) == .success(Self.sha256("just written")))
        let writeOnly = open(file.path, O_WRONLY | O_CLOEXEC)
        defer { close(writeOnly) }
        #expect(ExecutableHashes.sha256(of: writeOnly, limit: 1 << 20, now: now) == .failure(.readFailed(errno: EBADF)))
    }

    @Test(arguments: [(-100, true), (-3, true), (-2, false), (-1, false), (0, false), (5, false)])
    func aHashIsKeptOnlyOnceTheChangeTimeHasSettled(changedSecondsFromNow: Int, kept: Bool) throws {
        let file = try ScratchFile("x")
        var version = ExecutableHashes.FileVersion(file.info)
        let now = ExecutableHashes.FileTime(seconds: 1_000_000, nanoseconds: 500)
        version.changed = ExecutableHashes.FileTime(seconds: now.seconds + changedSecondsFromNow, nanoseconds: 500)
        #expect(ExecutableHashes.isSettled(version, now: now) == kept)
    }

    @Test func aFileLargerThanTheLimitIsNotHashed() throws {
        let file = try ScratchFile("0123456789")
        #expect(ExecutableHashes.sha256(of: file.fd, limit: 4, now: ExecutableHashes.now()) == .failure(.tooLarge(limit: 4)))
    }
}

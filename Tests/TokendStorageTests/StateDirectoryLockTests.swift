import Foundation
import Testing

@testable import TokendStorage

#if canImport(Glibc)
    import Glibc
#endif

struct StateDirectoryLockTests {
    static let flock = "/usr/bin/flock"

    /// Acquires, retrying `.locked` for a while. Needed only where this process has just released
    /// the lock: Foundation's `Process` (used by other tests running in parallel) spawns children
    /// that inherit a copy of every descriptor and close them one by one before `exec`, and
    /// during that window a child's copy keeps the released lock alive. A lock that is really
    /// still held fails after the deadline, so the test can still fail.
    static func acquireAfterRelease(_ directory: String) async throws -> StateDirectoryLock {
        let deadline = ContinuousClock.now + .seconds(5)
        while true {
            do {
                return try StateDirectoryLock.acquire(directory: directory)
            } catch let error as StorageError where error.code == .locked && ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(20))
            }
        }
    }

    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: flock), "needs flock(1) from util-linux"))
    func theLockKeepsOtherProcessesOutUntilReleased() async throws {
        try await withTemporaryDirectory { directory in
            let state = "\(directory)/state"
            let lock = try StateDirectoryLock.acquire(directory: state)
            #expect(lock.isHeld)
            #expect(try readFile(lock.path) == "\(getpid())\n")
            #expect(permissions(lock.path) == 0o600)
            #expect(permissions(state) == 0o700)
            // flock -n exits 1 when it cannot take the lock at once.
            #expect(try run(Self.flock, ["-n", lock.path, "true"]) == 1)
            lock.release()
            #expect(!lock.isHeld)
            // Retried for the reason given at `acquireAfterRelease`.
            var status = try run(Self.flock, ["-n", lock.path, "true"])
            let deadline = ContinuousClock.now + .seconds(5)
            while status != 0 && ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(20))
                status = try run(Self.flock, ["-n", lock.path, "true"])
            }
            #expect(status == 0)
        }
    }

    @Test func aSecondAcquisitionFailsNamingTheHolderAndWorksAfterRelease() async throws {
        try await withTemporaryDirectory { directory in
            let first = try StateDirectoryLock.acquire(directory: directory)
            let error = await expectStorageError(.locked) { _ = try StateDirectoryLock.acquire(directory: directory) }
            #expect(error?.message.hasPrefix("another tokend (pid \(getpid())) is already using \(directory)") == true)
            // The failed attempt must not have disturbed the holder's pid.
            #expect(try readFile(first.path) == "\(getpid())\n")
            first.release()
            first.release()  // idempotent
            let second = try await Self.acquireAfterRelease(directory)
            #expect(second.isHeld)
            second.release()
        }
    }

    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: flock), "needs flock(1) from util-linux"))
    func aLockHeldByAnotherProcessIsRefusedWithItsPIDAndFreedWhenItDies() async throws {
        try await withTemporaryDirectory { directory in
            let path = "\(directory)/\(StateDirectoryLock.fileName)"
            // flock(1) takes the lock, then its child writes its pid into the file the way
            // tokend does and sleeps; -o keeps the lock with flock(1) alone, which exits when
            // the child does.
            let holder = Process()
            holder.executableURL = URL(fileURLWithPath: Self.flock)
            holder.arguments = ["-o", path, "sh", "-c", "echo $$ > '\(path)'; exec sleep 60"]
            try holder.run()
            defer {
                if holder.isRunning { kill(holder.processIdentifier, SIGKILL) }
            }

            var childPID: Int32?
            for _ in 0..<500 where childPID == nil {
                childPID = (try? readFile(path)).flatMap { Int32($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
                if childPID == nil { try await Task.sleep(for: .milliseconds(10)) }
            }
            let pid = try #require(childPID)

            let error = await expectStorageError(.locked) { _ = try StateDirectoryLock.acquire(directory: directory) }
            #expect(error?.message.hasPrefix("another tokend (pid \(pid)) is already using \(directory)") == true)

            // The kernel drops the lock when its holder dies; no stale lock remains.
            #expect(kill(pid, SIGKILL) == 0)
            holder.waitUntilExit()
            let lock = try await Self.acquireAfterRelease(directory)
            #expect(try readFile(lock.path) == "\(getpid())\n")
            lock.release()
        }
    }
}

import TokendCore
import TokendStorage

#if canImport(Glibc)
    import Glibc
#endif

/// Reads a calling program's facts (its systemd unit and executable) from the kernel through a
/// pidfd of the process that connected, race-free against pid reuse: the pid is taken from the
/// pidfd, `/proc/PID/cgroup` and `/proc/PID/exe` are read, and only then is the pidfd checked to
/// still refer to a live process. While it does, the pid cannot have been reused, so what was
/// read belongs to the caller; if it exited meanwhile, the facts are refused.
enum ProgramIdentity {
    /// Executables larger than this are not hashed (an `exe:…@sha256:` reader then refuses).
    static let maximumHashedBytes = 256 << 20

    /// A source that reads the facts of the process behind `pidfd` once, when first needed,
    /// and closes `pidfd` when the connection's last reference goes.
    static func source(pidfd: Int32) -> ProgramFactsSource {
        ProgramFactsSource(load: { withHash in facts(pidfd: pidfd, withHash: withHash) }, release: { _ = close(pidfd) })
    }

    static func facts(pidfd: Int32, withHash: Bool) -> Result<ProgramFacts, ProgramFactsUnavailable> {
        guard let pid = pid(ofPidfd: pidfd) else { return .failure(.processExited) }
        let cgroup = readSmallFile("/proc/\(pid)/cgroup")
        let executable = readLink("/proc/\(pid)/exe")
        var digest: Result<String, FileDigest.Failure>?
        if withHash, case .success = executable { digest = sha256(ofExecutableOf: pid) }
        // Only now: while the pidfd's process lives, `pid` is still that process.
        guard isAlive(pidfd) else { return .failure(.processExited) }
        if case .failure(let failure) = cgroup, case .failure = executable {
            return .failure(.unreadable("/proc/\(pid) is not readable (\(String(cString: strerror(failure.code))))"))
        }
        var facts = ProgramFacts(
            unit: (try? cgroup.get()).flatMap { ProgramFacts.unit(fromCgroup: $0) }, executable: try? executable.get())
        switch digest {
        case .success(let hex)?: facts.sha256 = hex
        case .failure(let failure)?: facts.sha256Problem = "no sha256: \(failure)"
        case nil: break
        }
        return .success(facts)
    }

    /// The pid the pidfd refers to, from `/proc/self/fdinfo/FD`'s `Pid:` line; `nil` when the
    /// process has been reaped (`-1`) or is not visible here (`0`).
    static func pid(ofPidfd pidfd: Int32) -> Int32? {
        guard case .success(let text) = readSmallFile("/proc/self/fdinfo/\(pidfd)") else { return nil }
        for line in text.split(separator: "\n") where line.hasPrefix("Pid:") {
            guard let pid = Int32(line.dropFirst(4).trimmingPrefix(while: { $0 == " " || $0 == "\t" })), pid > 0 else { return nil }
            return pid
        }
        return nil
    }

    /// Whether the pidfd's process has not exited: a pidfd polls readable once it has (a zombie
    /// included).
    static func isAlive(_ pidfd: Int32) -> Bool {
        var entry = pollfd(fd: pidfd, events: Int16(POLLIN), revents: 0)
        let ready = poll(&entry, 1, 0)
        return ready == 0
    }

    /// The sha256 of the file the process runs (opened through `/proc/PID/exe`, so a file
    /// replaced at the same path since is not what is hashed).
    static func sha256(ofExecutableOf pid: Int32) -> Result<String, FileDigest.Failure> {
        let fd = open("/proc/\(pid)/exe", O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return .failure(.readFailed(errno: errno)) }
        defer { close(fd) }
        return ExecutableHashes.sha256(of: fd, limit: maximumHashedBytes, now: ExecutableHashes.now())
    }

    // MARK: /proc

    struct ProcError: Error {
        var code: Int32
    }

    /// A `/proc` file's text (at most 64 KiB), or the errno.
    static func readSmallFile(_ path: String) -> Result<String, ProcError> {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return .failure(ProcError(code: errno)) }
        defer { close(fd) }
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while bytes.count < 65536 {
            let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if count < 0 {
                if errno == EINTR { continue }
                return .failure(ProcError(code: errno))
            }
            if count == 0 { break }
            bytes += buffer[0..<count]
        }
        return .success(String(decoding: bytes, as: UTF8.self))
    }

    /// The target of a `/proc/PID/exe` link, or the errno.
    static func readLink(_ path: String) -> Result<String, ProcError> {
        var buffer = [CChar](repeating: 0, count: 4097)
        let count = buffer.withUnsafeMutableBufferPointer { readlink(path, $0.baseAddress!, $0.count) }
        guard count >= 0 else { return .failure(ProcError(code: errno)) }
        guard count < buffer.count else { return .failure(ProcError(code: ENAMETOOLONG)) }
        return .success(String(decoding: buffer[0..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self))
    }
}

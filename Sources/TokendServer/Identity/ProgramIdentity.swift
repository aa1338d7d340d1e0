import Synchronization
import TokendCore
import TokendStorage

#if canImport(Glibc)
    import Glibc
#endif

/// Reads a connecting program's facts (its systemd unit and executable) from the kernel through
/// a pidfd of the process that connected, race-free against pid reuse: `/proc/PID/…` is read,
/// and only then is the pidfd checked to still refer to a live process. While it does, the pid
/// (`SO_PEERCRED`'s, the pidfd's process) cannot have been reused, so what was read belongs to
/// that process; if it exited meanwhile, the facts are refused.
///
/// Which file the process runs is read when the connection is accepted (``ExecutableFile``) and
/// again at every check, so that a process that has `exec`ed another file since is seen to have
/// done so (``ConnectedProgram``).
enum ProgramIdentity {
    /// Executables larger than this are not hashed (an `exe:…@sha256:` reader then refuses).
    static let maximumHashedBytes = 256 << 20

    /// Every fact of the process `pid` (the pidfd's), `running` being the file it runs (read just
    /// before) and `atConnect` the one it ran at accept (`nil`: not read, the connection is not
    /// traced; the facts are then only shown, e.g. by `Status`, and count as another executable).
    static func facts(pidfd: Int32, pid: Int32, atConnect: ExecutableFile?, running: ExecutableFile, withHash: Bool)
        -> Result<ProgramFacts, ProgramFactsUnavailable>
    {
        guard pid > 0 else { return .failure(.unreadable("the process that connected is not visible in tokend's pid namespace")) }
        let cgroup = readSmallFile("/proc/\(pid)/cgroup")
        let executable = readLink("/proc/\(pid)/exe")
        let ownPidNamespace = isInOwnPidNamespace(pid)
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
        facts.executableIsAtItsPath = facts.executable.map { running == ExecutableFile(path: $0) } ?? false
        facts.execedSinceConnect = atConnect.map { running != $0 } ?? true
        facts.inTokendsPidNamespace = ownPidNamespace
        return .success(facts)
    }

    /// Which file a process runs: the device and inode `/proc/PID/exe` leads to, or why it could
    /// not be read (another user's process needs the rights of ptrace). The same across a rename
    /// or removal of the file (a package upgrade); another after an `exec` of another file, and
    /// after an `exec` that changes whether tokend may look (a set-uid program).
    struct ExecutableFile: Equatable {
        var device: UInt64 = 0
        var inode: UInt64 = 0
        var errno: Int32 = 0
        /// The file's version (size, modification and change times), not part of equality: a
        /// change of it (a `chmod`, or contents written) is no `exec`, but makes tokend read the
        /// facts (the hash) again.
        var version: ExecutableHashes.FileVersion?

        init(pid: Int32) {
            self.init(path: pid > 0 ? "/proc/\(pid)/exe" : nil)
        }

        static func == (lhs: Self, rhs: Self) -> Bool {
            (lhs.device, lhs.inode, lhs.errno) == (rhs.device, rhs.inode, rhs.errno)
        }

        /// The file at `path` in tokend's mount namespace (`nil`: no file, ESRCH).
        init(path: String?) {
            var info = stat()
            guard let path else {
                errno = ESRCH
                return
            }
            if stat(path, &info) == 0 {
                device = UInt64(info.st_dev)
                inode = UInt64(info.st_ino)
                version = ExecutableHashes.FileVersion(info)
            } else {
                errno = Glibc.errno
            }
        }
    }

    /// tokend's own pid namespace (`pid:[INODE]`), if it can be read.
    static let ownPidNamespace = try? readLink("/proc/self/ns/pid").get()

    /// Whether process `pid` is in tokend's pid namespace: its `/proc/PID/ns/pid` is tokend's, or,
    /// where tokend may not read that link (another user's process needs the rights of ptrace),
    /// the `NSpid:` line of its `/proc/PID/status` names one pid only (it is not in a namespace
    /// nested below that of tokend's `/proc`).
    static func isInOwnPidNamespace(_ pid: Int32) -> Bool {
        if let own = ownPidNamespace, case .success(let namespace) = readLink("/proc/\(pid)/ns/pid") { return namespace == own }
        guard case .success(let status) = readSmallFile("/proc/\(pid)/status") else { return false }
        return isInOwnPidNamespace(status: status)
    }

    /// Whether the `NSpid:` line of a `/proc/PID/status` text names one pid only.
    static func isInOwnPidNamespace(status: String) -> Bool {
        for line in status.split(separator: "\n") where line.hasPrefix("NSpid:") {
            return line.dropFirst("NSpid:".count).split(whereSeparator: { $0 == " " || $0 == "\t" }).count == 1
        }
        return false
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
    ///
    /// The first read goes to a buffer on the stack: the files read here (`cgroup`, `status`) fit
    /// in one page, and a connection per call reads one for each record of the audit trail.
    static func readSmallFile(_ path: String) -> Result<String, ProcError> {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return .failure(ProcError(code: errno)) }
        defer { close(fd) }
        var bytes: [UInt8] = []
        let pageSize = 4096
        let failure: Int32? = withUnsafeTemporaryAllocation(of: UInt8.self, capacity: pageSize) { buffer in
            while bytes.count < 65536 {
                let count = read(fd, buffer.baseAddress, pageSize)
                if count < 0 {
                    if errno == EINTR { continue }
                    return errno
                }
                if count == 0 { break }
                bytes.append(contentsOf: UnsafeBufferPointer(rebasing: buffer[0..<count]))
            }
            return nil
        }
        if let failure { return .failure(ProcError(code: failure)) }
        return .success(String(decoding: bytes, as: UTF8.self))
    }

    /// The target of a `/proc/PID/exe` link, or the errno.
    static func readLink(_ path: String) -> Result<String, ProcError> {
        let capacity = Int(PATH_MAX) + 1
        return withUnsafeTemporaryAllocation(of: UInt8.self, capacity: capacity) { buffer in
            let count = buffer.withMemoryRebound(to: CChar.self) { readlink(path, $0.baseAddress!, capacity) }
            guard count >= 0 else { return .failure(ProcError(code: errno)) }
            guard count < capacity else { return .failure(ProcError(code: ENAMETOOLONG)) }
            return .success(String(decoding: UnsafeBufferPointer(rebasing: buffer[0..<count]), as: UTF8.self))
        }
    }
}

/// The process that connected, through its pidfd (`SO_PEERPIDFD`), closed when the last
/// reference goes.
///
/// Its facts are read in full at the first check, and kept: all but the file the process runs
/// change only with an `exec` (its unit only if root moves it, its pid namespace never). Each
/// later check reads whether it still lives (one `poll`) and, for an `exe:` reader, which file it
/// runs (one `stat`), and reads everything again when that file's version changed.
final class ConnectedProgram: Sendable {
    let pidfd: Int32
    /// `SO_PEERCRED`'s pid: the pidfd's process, for as long as the pidfd shows it alive.
    let pid: Int32

    private struct State {
        /// Which file the process ran when its connection was accepted; `nil` until then.
        var atConnect: ProgramIdentity.ExecutableFile?
        /// The facts last read in full while it ran that file, and of which version of it.
        var known: (facts: ProgramFacts, hashed: Bool, version: ExecutableHashes.FileVersion?)?
    }

    private let state = Mutex(State())

    init(pidfd: Int32, pid: Int32) {
        self.pidfd = pidfd
        self.pid = pid
    }

    deinit { close(pidfd) }

    /// Reads which file the process runs now, when its connection is accepted: what later
    /// checks compare with. Without it, program readers grant nothing.
    func noteAccepted() {
        let file = ProgramIdentity.ExecutableFile(pid: pid)
        state.withLock { $0.atConnect = file }
    }

    /// The facts as they are now, at least those a check `need`s.
    func facts(_ need: ProgramFacts.Need) -> Result<ProgramFacts, ProgramFactsUnavailable> {
        let (atConnect, known) = state.withLock { ($0.atConnect, $0.known) }
        if let atConnect, let known, known.hashed || need < .hash, pid > 0 {
            // The unit and the pid namespace stay across an `exec`: that the process still lives
            // (and so is still the one `pid` names) is all a `unit:` reader needs again.
            guard need >= .executable else {
                return ProgramIdentity.isAlive(pidfd) ? .success(known.facts) : .failure(.processExited)
            }
            let running = ProgramIdentity.ExecutableFile(pid: pid)
            // Only now: while the pidfd's process lives, `pid` is still that process.
            guard ProgramIdentity.isAlive(pidfd) else { return .failure(.processExited) }
            if running != atConnect {
                var facts = known.facts
                facts.execedSinceConnect = true
                return .success(facts)
            }
            if running.version == known.version { return .success(known.facts) }
        }
        // The file's version before the facts: were it changed while they are read, the next
        // check would see another version and read them again.
        let running = ProgramIdentity.ExecutableFile(pid: pid)
        let withHash = need == .hash
        let result = ProgramIdentity.facts(pidfd: pidfd, pid: pid, atConnect: atConnect, running: running, withHash: withHash)
        if case .success(let facts) = result, !facts.execedSinceConnect {
            state.withLock { $0.known = (facts, withHash, running.version) }
        }
        return result
    }

    /// A source of the facts, once per check (it keeps this program, and so the pidfd, open).
    var source: ProgramFactsSource {
        ProgramFactsSource(load: { need in self.facts(need) })
    }
}

import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

// Part of TokendTestSupport, the helpers every test target shares.

/// A child started with `posix_spawn` and reaped by `waitpid(pid, WNOHANG)`, out of Foundation's
/// sight.
///
/// For programs that close every descriptor they did not create, as `systemd-socket-activate`
/// does: Foundation's `Process` learns that a child has ended when a descriptor the child
/// inherited closes, so it takes that close for the child's end and its monitor thread then waits
/// in `waitpid` on that one child, reaping no other child of the test process until it exits.
/// Every later `waitUntilExit()` of the suite then hangs, and with it a thread of the cooperative
/// pool. A child this type starts is reaped only here.
///
/// The child starts with no blocked signals and default dispositions, as a service manager
/// starts a service (the test process blocks some signals, and a child would inherit that).
public final class SpawnedProcess: Sendable {
    public struct Failure: Error, CustomStringConvertible {
        public let description: String
    }

    public let processIdentifier: pid_t
    private let status = Mutex<Int32?>(nil)
    private let name: String

    /// Starts `executable` with `arguments` and `environment`, its output and errors appended to
    /// `outputPath`, its input `/dev/null`.
    public init(_ executable: String, _ arguments: [String], environment: [String: String], outputPath: String) throws {
        name = (executable as NSString).lastPathComponent
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, outputPath, O_WRONLY | O_APPEND | O_CREAT, 0o644)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)

        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var noSignals = sigset_t()
        sigemptyset(&noSignals)
        var allSignals = sigset_t()
        sigfillset(&allSignals)
        posix_spawnattr_setsigmask(&attributes, &noSignals)
        posix_spawnattr_setsigdefault(&attributes, &allSignals)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))

        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            for pointer in argv { free(pointer) }
            for pointer in envp { free(pointer) }
        }
        var pid = pid_t()
        let result = posix_spawn(&pid, executable, &actions, &attributes, argv, envp)
        guard result == 0 else {
            throw Failure(description: "posix_spawn(\(executable)) failed: \(String(cString: strerror(result)))")
        }
        processIdentifier = pid
    }

    /// The exit status (or 128 + the signal that ended it), once the child has been reaped.
    public var terminationStatus: Int32? {
        status.withLock { status in
            if let status { return status }
            var raw: Int32 = 0
            guard waitpid(processIdentifier, &raw, WNOHANG) == processIdentifier else { return nil }
            let signal = raw & 0x7f
            status = signal == 0 ? (raw >> 8) & 0xff : 128 + signal
            return status
        }
    }

    public var isRunning: Bool { terminationStatus == nil }

    /// Sends `signal` and waits for the child to end; SIGKILLs it and fails after `timeout`.
    @discardableResult
    public func terminate(signal: Int32 = SIGTERM, timeout: Duration = .seconds(20)) async throws -> Int32 {
        if let status = terminationStatus { return status }
        kill(processIdentifier, signal)
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if let status = terminationStatus { return status }
            try await Task.sleep(for: .milliseconds(20))
        }
        kill(processIdentifier, SIGKILL)
        throw Failure(description: "\(name) did not stop within \(timeout) of signal \(signal)")
    }

    deinit {
        if terminationStatus == nil {
            kill(processIdentifier, SIGKILL)
            var raw: Int32 = 0
            waitpid(processIdentifier, &raw, 0)
        }
    }
}

import Dispatch
import Logging
import Synchronization
import TokendConfig

#if canImport(Glibc)
    import Glibc
#endif

/// Keeps token files up to date: each configured user's current access token, written
/// atomically on every change and removed when the credential is removed or needs a new login.
///
/// Writes run on one serial queue, in the order the changes happened, off the event loops.
final class TokenFileSinks: Sendable {
    private let hub: WatchHub
    private let logger: Logger
    private let queue = DispatchQueue(label: "tokend.token-files")
    private let subscriptions = Mutex<[(user: String, id: UInt64)]>([])
    /// Where each write is recorded (``useAudit(_:)``).
    private let audit = Mutex(AuditTrail.disabled)

    init(hub: WatchHub, logger: Logger) {
        self.hub = hub
        self.logger = logger
    }

    /// Records every write of a token file in `trail` from now on.
    func useAudit(_ trail: AuditTrail) { audit.withLock { $0 = trail } }

    /// Subscribes to the configured users (replacing earlier subscriptions, e.g. on reload) and
    /// writes each file once from `current`.
    func apply(_ files: [String: TokenFileConfiguration], current: (String) -> ViewEntry?) {
        let old = subscriptions.withLock { all in
            defer { all.removeAll() }
            return all
        }
        for subscription in old { hub.unsubscribe(subscription.user, id: subscription.id) }
        let trail = audit.withLock { $0 }
        for (user, file) in files {
            let id = hub.subscribe(user) { [queue, logger] event in
                queue.async { Self.handle(event, file: file, user: user, logger: logger, audit: trail) }
            }
            subscriptions.withLock { $0.append((user, id)) }
            if let entry = current(user) {
                let event: WatchEvent =
                    entry.status.state == .reauthenticationRequired ? .reauthenticationRequired(reason: "") : .updated(entry)
                queue.async { [logger] in Self.handle(event, file: file, user: user, logger: logger, audit: trail) }
            }
        }
    }

    /// Waits until every write queued so far is done (shutdown, tests).
    func flush() { queue.sync {} }

    private static func handle(_ event: WatchEvent, file: TokenFileConfiguration, user: String, logger: Logger, audit: AuditTrail) {
        switch event {
        case .updated(let entry):
            if let problem = writeAtomically(Array(entry.accessToken.utf8), to: file.path, mode: file.mode) {
                logger.error(
                    "writing a token file failed",
                    metadata: ["user_identifier": "\(user)", "path": "\(file.path)", "problem": "\(problem)"])
            } else {
                audit.tokenFileWritten(entry, path: file.path)
            }
        case .removed, .reauthenticationRequired:
            if unlink(file.path) != 0, errno != ENOENT {
                logger.error(
                    "removing a token file failed",
                    metadata: ["user_identifier": "\(user)", "path": "\(file.path)", "problem": "\(String(cString: strerror(errno)))"])
            }
        }
    }

    /// Temporary file in the same folder (so the rename is atomic), exact mode, fsync, rename,
    /// fsync the folder. A reader sees the old file or the new one, never a part.
    static func writeAtomically(_ bytes: [UInt8], to path: String, mode: UInt32) -> String? {
        let directory = path.lastIndex(of: "/").map { String(path[..<$0]) } ?? "."
        let temporary = "\(path).tmp-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode_t(mode))
        guard fd >= 0 else { return "cannot create \(temporary): \(String(cString: strerror(errno)))" }
        var ok = fchmod(fd, mode_t(mode)) == 0  // the umask must not narrow (or widen) the configured mode
        var offset = 0
        while ok, offset < bytes.count {
            let n = bytes[offset...].withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            if n <= 0 { ok = false } else { offset += n }
        }
        ok = ok && fsync(fd) == 0
        let problem = ok ? nil : String(cString: strerror(errno))
        close(fd)
        guard ok, rename(temporary, path) == 0 else {
            let reason = problem ?? String(cString: strerror(errno))
            unlink(temporary)
            return reason
        }
        let dirfd = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if dirfd >= 0 {
            fsync(dirfd)
            close(dirfd)
        }
        return nil
    }
}

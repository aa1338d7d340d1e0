import ArgumentParser
import TokenctlSupport
import TokendClient

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

extension Tokenctl {
    /// `tokenctl notify [--state-file PATH]`: the desktop companion of re-login warnings.
    struct Notify: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Show the re-login warnings of your credentials as desktop notifications.",
            discussion: """
                Follows the re-login warnings tokend says for the credentials your uid owns or \
                reads (WatchReloginWarnings) and shows each one once as a desktop notification \
                on your session bus (org.freedesktop.Notifications, sent with busctl), with the \
                command that renews the credential. What it showed is kept in \
                $XDG_STATE_HOME/tokend/notified (default ~/.local/state/tokend/notified), so a \
                warning is not shown again after a reconnection or a restart.

                It runs until stopped, and reconnects (backing off up to 30 seconds) while tokend \
                is not running or restarts. Without a session bus (DBUS_SESSION_BUS_ADDRESS unset \
                and no $XDG_RUNTIME_DIR/bus, or a bus that does not answer) it prints one line \
                and exits with status 0: there is no desktop to notify.

                Run it as a systemd user unit: \
                systemctl --user enable --now tokend-notify.service
                """
        )

        @OptionGroup var global: GlobalOptions

        @Option(
            name: .customLong("state-file"),
            help: ArgumentHelp("Where to remember what was shown (default: $XDG_STATE_HOME/tokend/notified).", valueName: "path"))
        var stateFile: String?

        /// The backoff between attempts to reach tokend while it is not running.
        static let reconnectBackoff = ReconnectBackoff(initial: .seconds(1), maximum: .seconds(30))

        func run() async throws {
            guard SessionBus.isReachable() else {
                Terminal.writeError("tokenctl notify: no session bus to show notifications on; nothing to do")
                return
            }
            let path = try stateFile ?? NotifiedFile.defaultPath()
            var record = NotifiedRecord(text: NotifiedFile.load(path))
            record.prune(now: Terminal.now())
            Terminal.writeError("tokenctl notify: following re-login warnings; shown so far: \(record.keys.count)")
            var backoff = Self.reconnectBackoff
            while !Task.isCancelled {
                let client = global.makeClient()
                do {
                    for try await warning in client.reloginWarnings() {
                        backoff.reset()
                        guard !record.contains(warning) else { continue }
                        let notification = ReloginNotification(warning, utcOffsetSeconds: Self.utcOffset(at: warning.reloginBy))
                        guard SessionBus.notify(notification) else {
                            Terminal.writeError("tokenctl notify: the notification for '\(warning.userIdentifier)' could not be shown")
                            continue
                        }
                        record.insert(warning)
                        do {
                            try NotifiedFile.store(record.text, to: path)
                        } catch {
                            Terminal.writeError("tokenctl notify: \(error)")
                        }
                    }
                } catch {
                    switch error.code {
                    case .daemonUnavailable, .timeout, .protocolError:
                        break
                    default:
                        await client.close()
                        throw Terminal.fail(error)
                    }
                }
                await client.close()
                try await Task.sleep(for: backoff.nextDelay(jitter: Double.random(in: 0...1)))
            }
        }

        /// The local time zone's offset from UTC at `epochSeconds`.
        static func utcOffset(at epochSeconds: Int64) -> Int64 {
            var time = time_t(epochSeconds)
            var broken = tm()
            guard localtime_r(&time, &broken) != nil else { return 0 }
            return Int64(broken.tm_gmtoff)
        }
    }
}

/// The user's session bus, reached through systemd's `busctl --user` (sd-bus): tokenctl is a
/// static executable and links no libsystemd of its own.
enum SessionBus {
    static let busctl = "/usr/bin/busctl"

    /// Whether a session bus is configured and answers.
    static func isReachable() -> Bool {
        let environment = ProcessEnvironment.current()
        let configured =
            environment.contains { $0.hasPrefix("DBUS_SESSION_BUS_ADDRESS=") && $0.count > "DBUS_SESSION_BUS_ADDRESS=".count }
            || environment.first { $0.hasPrefix("XDG_RUNTIME_DIR=") }.map { access(String($0.dropFirst(16)) + "/bus", F_OK) == 0 } == true
        guard configured, access(busctl, X_OK) == 0 else { return false }
        return run(["--user", "--timeout=5", "call", "org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus", "GetId"])
    }

    /// `org.freedesktop.Notifications.Notify(app_name, replaces_id, app_icon, summary, body,
    /// actions, hints, expire_timeout)`; whether the notification server took it.
    static func notify(_ notification: ReloginNotification) -> Bool {
        run([
            // After "--", "-1" is an argument, not an option.
            "--user", "--timeout=10", "--", "call", "org.freedesktop.Notifications", "/org/freedesktop/Notifications",
            "org.freedesktop.Notifications", "Notify", "susssasa{sv}i", ReloginNotification.applicationName, "0", "dialog-password",
            notification.summary, notification.body, "0", "0", "-1",
        ])
    }

    /// Runs busctl with `arguments`, its output discarded; whether it exited with 0.
    private static func run(_ arguments: [String]) -> Bool {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
        let argv = ([busctl] + arguments).map { strdup($0) }
        defer { for pointer in argv { free(pointer) } }
        let environment = ProcessEnvironment.current().map { strdup($0) }
        defer { for pointer in environment { free(pointer) } }
        var pid: pid_t = 0
        let spawned = (argv + [nil]).withUnsafeBufferPointer { args in
            (environment + [nil]).withUnsafeBufferPointer { env in
                posix_spawn(&pid, busctl, &actions, nil, args.baseAddress!, env.baseAddress!)
            }
        }
        guard spawned == 0 else { return false }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 {
            guard errno == EINTR else { return false }
        }
        // Exited (low 7 bits zero) with status 0.
        return status & 0x7f == 0 && (status >> 8) & 0xff == 0
    }
}

/// The file of ``NotifiedRecord``.
enum NotifiedFile {
    struct Failure: Error, CustomStringConvertible {
        let description: String
    }

    /// `$XDG_STATE_HOME/tokend/notified`, else `$HOME/.local/state/tokend/notified`.
    static func defaultPath() throws -> String {
        let environment = ProcessEnvironment.current()
        func value(_ name: String) -> String? {
            environment.first { $0.hasPrefix(name + "=") }.map { String($0.dropFirst(name.count + 1)) }.flatMap {
                $0.hasPrefix("/") ? $0 : nil
            }
        }
        if let state = value("XDG_STATE_HOME") { return state + "/tokend/notified" }
        guard let home = value("HOME") else {
            throw ValidationError("Neither XDG_STATE_HOME nor HOME is set to an absolute path; give --state-file.")
        }
        return home + "/.local/state/tokend/notified"
    }

    /// The file's text; empty when it does not exist (or cannot be read). At most 1 MiB.
    static func load(_ path: String) -> String {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return "" }
        defer { close(descriptor) }
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        while bytes.count < 1 << 20 {
            let count = read(descriptor, &buffer, buffer.count)
            if count < 0, errno == EINTR { continue }
            guard count > 0 else { break }
            bytes += buffer[0..<count]
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Replaces the file with `text` (a new file renamed over it, mode 0600), making its
    /// directories (mode 0700) first.
    static func store(_ text: String, to path: String) throws {
        var directory = ""
        for part in path.split(separator: "/").dropLast() {
            directory += "/" + part
            if mkdir(directory, 0o700) != 0, errno != EEXIST {
                throw Failure(description: "cannot make \(directory): \(String(cString: strerror(errno)))")
            }
        }
        let temporary = path + ".new"
        let descriptor = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { throw Failure(description: "cannot write \(temporary): \(String(cString: strerror(errno)))") }
        let bytes = Array(text.utf8)
        var written = 0
        while written < bytes.count {
            let count = bytes[written...].withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
            if count < 0, errno == EINTR { continue }
            guard count > 0 else {
                close(descriptor)
                throw Failure(description: "cannot write \(temporary): \(String(cString: strerror(errno)))")
            }
            written += count
        }
        close(descriptor)
        guard rename(temporary, path) == 0 else {
            throw Failure(description: "cannot rename \(temporary): \(String(cString: strerror(errno)))")
        }
    }
}

import Foundation
import Testing
import TokendTestSupport

/// The `relogin_command` hook as a local user can drive it: many credentials warning at once,
/// and a hook that leaves a process of its own behind when it hangs.
@Suite struct ReloginHookTests {
    /// `count` credentials whose refresh tokens (JWTs) all expire `lead` plus `delay` from now,
    /// so that a `relogin_warning` of `lead` passes for all of them at the same moment.
    static func addCredentials(count: Int, lead: Int, delay: Int, client: RawClient) throws {
        let expiry = Int(Date().timeIntervalSince1970) + lead + delay
        for index in 0..<count {
            let refresh = ReloginWarningTests.refreshToken(expiringAt: expiry)
            let reply = try client.call(Tokens.addCall(user: "user\(index)", access: Tokens.random("a-"), refresh: refresh))
            guard reply.errorName == nil else { throw TestFailure("AddCredential failed: \(reply)") }
        }
    }

    /// The most hooks that ran at once, from `start NANOS`/`end NANOS` lines.
    static func mostAtOnce(_ lines: [String]) -> Int {
        let events = lines.compactMap { line -> (Int, Int)? in
            let parts = line.split(separator: " ")
            guard parts.count == 2, let time = Int(parts[1]) else { return nil }
            return (time, parts[0] == "start" ? 1 : -1)
        }
        // Ends before starts at the same instant: a slot given back is taken again.
        var running = 0
        var most = 0
        for (_, change) in events.sorted(by: { $0.0 != $1.0 ? $0.0 < $1.0 : $0.1 < $1.1 }) {
            running += change
            most = max(most, running)
        }
        return most
    }

    static func lines(_ path: String) -> [String] {
        ((try? String(contentsOfFile: path, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
    }

    /// A started daemon whose provider warns 1 h ahead and runs `hook` (a shell script body)
    /// for each warning, with `extra` provider keys.
    static func daemon(hook: String, in hooks: ScratchDirectory, extra: String = "") async throws -> DaemonProcess {
        try hooks.write("hook.sh", "#!/bin/sh\n" + hook, mode: 0o755)
        let providers =
            DaemonProcess.defaultProviders + """

                relogin_warning = ["1h"]
                relogin_command = "\(hooks.file("hook.sh"))"
                \(extra)
                """
        let daemon = try DaemonProcess(configuration: DaemonProcess.configuration(providers: providers))
        try await daemon.start()
        return daemon
    }

    /// Twelve credentials of one user warn at the same moment: the hooks run at most
    /// `max_relogin_commands` (4 by default) at a time, and every one of them runs.
    @Test func manyWarningsAtOnceRunAtMostTheBoundOfHooks() async throws {
        let hooks = try ScratchDirectory()
        let log = hooks.file("hooks.log")
        let daemon = try await Self.daemon(
            hook: "echo \"start $(date +%s%N)\" >> \(log)\nsleep 2\necho \"end $(date +%s%N)\" >> \(log)\n", in: hooks)
        defer { _ = Task { try? await daemon.stop() } }
        try Self.addCredentials(count: 12, lead: 3600, delay: 12, client: try RawClient(path: daemon.socketPath))

        try await pollUntil(timeout: .seconds(90), "12 hooks ran: \(Self.lines(log)) \(daemon.log.suffix(2000))") {
            Self.lines(log).filter { $0.hasPrefix("end ") }.count >= 12
        }
        let most = Self.mostAtOnce(Self.lines(log))
        #expect(most <= 4, "\(most) hooks ran at once")
        #expect(most >= 2, "the warnings came together (\(most) at once)")
    }

    /// A hook that starts a process of its own and hangs is killed at its timeout with
    /// everything it started.
    @Test func aHangingHookIsKilledWithWhatItStarted() async throws {
        let hooks = try ScratchDirectory()
        let pidFile = hooks.file("grandchild.pid")
        let daemon = try await Self.daemon(
            hook: "sleep 300 &\necho $! > \(pidFile)\nsleep 300\n", in: hooks, extra: #"relogin_command_timeout = "1s""#)
        defer { _ = Task { try? await daemon.stop() } }
        try Self.addCredentials(count: 1, lead: 3600, delay: 2, client: try RawClient(path: daemon.socketPath))

        try await pollUntil(timeout: .seconds(30), "the hook's timeout in the log: \(daemon.log.suffix(2000))") {
            daemon.log.contains("relogin_command did not finish within 1s and was killed")
        }
        let pid = try #require(Self.lines(pidFile).first.flatMap { Int32($0) }, "the hook wrote its child's pid")
        // Gone, or a zombie nobody has reaped yet: either way no longer running.
        func running() -> Bool {
            guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8) else { return false }
            let state = stat.split(separator: ")").last?.split(separator: " ").first
            return state != "Z"
        }
        try await pollUntil(timeout: .seconds(10), "the hook's own child (pid \(pid)) was killed too") { !running() }
    }
}

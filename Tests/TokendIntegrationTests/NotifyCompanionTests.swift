import Foundation
import Testing
import TokendTestSupport

/// `tokenctl notify`, the desktop companion of re-login warnings, end to end: the real tokend
/// and IdP (a 40 s login with warnings 30 s and 10 s before its end), a private session bus
/// (`dbus-run-session`) with python3-dbusmock's notification daemon recording each `Notify`
/// call, and the companion running as the uid that reads one of two credentials.
@Suite(.serialized)
struct NotifyCompanionTests {
    /// Runs in the private session: the notification daemon, then the companion; prints their
    /// pids. Bounded by `timeout` whatever the test does.
    static let session = #"""
        set -u
        dir=$1 socket=$2 tokenctl=$3
        timeout 180 /usr/bin/python3 -m dbusmock --template notification_daemon -l "$dir/notify.log" >/dev/null 2>&1 &
        mock=$!
        for _ in $(seq 1 200); do
          busctl --user status org.freedesktop.Notifications >/dev/null 2>&1 && break
          sleep 0.1
        done
        echo "mock $mock"
        bus=$(busctl --user call org.freedesktop.DBus /org/freedesktop/DBus org.freedesktop.DBus GetConnectionUnixProcessID s org.freedesktop.DBus)
        echo "bus ${bus#u }"
        XDG_STATE_HOME="$dir/state" timeout 180 "$tokenctl" notify --socket "$socket" &
        notify=$!
        echo "notify $notify"
        wait "$notify"
        echo "notify exited $?"
        kill "$mock" 2>/dev/null
        wait
        """#

    /// Runs its arguments with no signal blocked.
    static let unblockSignals =
        "import os, signal, sys; signal.pthread_sigmask(signal.SIG_SETMASK, []); os.execv(sys.argv[1], sys.argv[1:])"

    /// The recorded `Notify` calls (dbusmock's log: one line each).
    static func notifications(_ file: String) -> [String] {
        ((try? String(contentsOfFile: file, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init).filter {
            $0.contains(" Notify ")
        }
    }

    @Test func eachWarningIsShownOnceAcrossARestartAndOnlyToItsReader() async throws {
        guard IdentityProvider.isAvailable else { return }
        try #require(
            FileManager.default.fileExists(atPath: "/usr/lib/python3/dist-packages/dbusmock"),
            "python3-dbusmock is not installed (scripts/setup-host.sh installs it)")
        let setup = try await IdPDaemon.start(providerExtra: ReloginWarningTests.providerExtra)
        // dbus-daemon needs its uid in the password database: nobody's.
        let uid: UInt32 = 65534
        let companionDirectory = setup.directory.file("companion")
        try FileManager.default.createDirectory(atPath: companionDirectory, withIntermediateDirectories: true)
        #expect(chown(companionDirectory, uid, uid) == 0 && chmod(companionDirectory, 0o700) == 0)
        let log = companionDirectory + "/notify.log"

        // The test runner's threads block SIGTERM, and a child inherits that mask: without
        // `unblockSignals`, neither `timeout` nor dbus-run-session could stop what they started.
        let companion = try StreamingCommand(
            "/usr/bin/python3",
            [
                "-c", Self.unblockSignals, "/usr/bin/setpriv", "--reuid=\(uid)", "--regid=\(uid)", "--clear-groups",
                "/usr/bin/dbus-run-session", "--", "/bin/bash", "-c", Self.session, "session", companionDirectory,
                setup.daemon.socketPath, Repository.binary("tokenctl"),
            ])
        var pids: [Int32] = []
        defer {
            // `timeout` passes SIGTERM on to the program it runs (SIGKILL would orphan it); the
            // bus daemon goes too, as dbus-run-session is killed without a chance to stop it.
            for pid in pids { kill(pid, SIGTERM) }
            _ = Task { try? await setup.stop() }
        }
        _ = try await companion.line(startingWith: "notify ", timeout: .seconds(60))
        pids = companion.lines.compactMap { line in
            let fields = line.split(separator: " ")
            return fields.count == 2 && ["mock", "notify", "bus"].contains(fields[0]) ? Int32(fields[1]) : nil
        }
        try await pollUntil(timeout: .seconds(30), "the companion follows the warnings: \(companion.stderr)") {
            companion.stderr.contains("following re-login warnings")
        }

        // Alice is read by the companion's uid, bob is not.
        var client = try RawClient(path: setup.daemon.socketPath)
        try await ReloginWarningTests.add("alice", readers: ["uid:\(uid)"], setup: setup, client: client)
        try await ReloginWarningTests.add("bob", readers: ["uid:0"], setup: setup, client: client)

        // The 30 s warning is shown; then tokend restarts, and says it again to the companion
        // when it reconnects: it is not shown again.
        try await pollUntil(timeout: .seconds(45), "the first notification: \(companion.stderr) \(setup.daemon.log.suffix(2000))") {
            Self.notifications(log).count >= 1
        }
        let configuration = try String(contentsOfFile: setup.directory.file("tokend.toml"), encoding: .utf8)
        _ = try await setup.daemon.stop()
        let restarted = try DaemonProcess(configuration: configuration, directory: setup.directory)
        try await restarted.start()
        defer { _ = Task { try? await restarted.stop() } }
        // The 10 s warning comes over the new connection, after the warnings in force were
        // said again on it: once it is recorded as shown, exactly two were shown.
        let recordFile = companionDirectory + "/state/tokend/notified"
        try await pollUntil(timeout: .seconds(45), "the second notification: \(companion.stderr) \(restarted.log.suffix(2000))") {
            ((try? String(contentsOfFile: recordFile, encoding: .utf8)) ?? "").contains("\t10s\n")
        }
        let shown = Self.notifications(log)
        #expect(shown.count == 2, "\(shown)")
        // What a person sees: the desktop notifications, and `tokenctl status` with the date.
        let table = try await runCommand(Repository.binary("tokenctl"), ["status", "--socket", restarted.socketPath])
        #expect(table.status == 0 && table.stdout.contains("RELOGIN BY"), "\(table.stdout)\(table.stderr)")
        print("notify companion: recorded Notify calls:\n\(shown.joined(separator: "\n"))\ntokenctl status:\n\(table.stdout)")
        for line in shown {
            #expect(line.contains("\"tokend\" 0 \"dialog-password\" \"Log in again to example by "), "\(line)")
            #expect(line.contains("'alice'") && line.contains("Run: tokenctl login alice"), "\(line)")
            #expect(!line.contains("bob"), "\(line)")
        }
        let record = try String(contentsOfFile: recordFile, encoding: .utf8)
        #expect(record.split(separator: "\n").map { $0.split(separator: "\t").last ?? "" } == ["30s", "10s"], "\(record)")

        // The login ends; the companion is still running, and showed nothing more.
        client = try RawClient(path: restarted.socketPath)
        try await pollUntil(timeout: .seconds(30), "alice's login has ended") {
            (try OAuthRefreshTests.status(client, "alice")["state"] as? String) == "reauthentication_required"
        }
        #expect(Self.notifications(log).count == 2)
        #expect(!companion.stdout.contains("notify exited"), "\(companion.stdout) \(companion.stderr)")
    }

    /// Without a session bus there is nobody to notify: one line, status 0, no socket touched.
    @Test func withoutASessionBusItSaysSoAndExits() async throws {
        let directory = try ScratchDirectory()
        let result = try await runCommand(
            "/usr/bin/env",
            [
                "-u", "DBUS_SESSION_BUS_ADDRESS", "XDG_RUNTIME_DIR=\(directory.path)", "XDG_STATE_HOME=\(directory.path)",
                Repository.binary("tokenctl"), "notify", "--socket", directory.file("absent.sock"),
            ], timeout: .seconds(30))
        #expect(result.status == 0, "\(result)")
        #expect(result.stderr.split(separator: "\n").count == 1 && result.stderr.contains("no session bus"), "\(result.stderr)")
        #expect(!FileManager.default.fileExists(atPath: directory.file("tokend/notified")))
    }
}

import Foundation
import Synchronization
import Testing
import TokendTestSupport

/// tokend as a systemd service, tested for real without systemd as PID 1: our own
/// `NOTIFY_SOCKET` listener, `systemd-socket-activate`, our own journal socket in a private
/// mount namespace, SIGHUP/SIGTERM/SIGSTOP, the metrics endpoint, and the unit checks.
@Suite(.serialized, .timeLimit(.minutes(2)))
struct SystemdIntegrationTests {
    // MARK: sd_notify

    @Test func notifiesReadyStatusWatchdogReloadingAndStoppingInOrder() async throws {
        let (_, notify, daemon) = try await Self.startWithNotifySocket(["WATCHDOG_USEC": "1000000"])

        #expect(await notify.waitFor { $0.contains { $0["READY"] == "1" } }, "\(notify.messages)")
        let ready = try #require(notify.messages.first { $0["READY"] == "1" })
        #expect(
            ready["STATUS"] == "serving 0 credentials, 0 need reauthentication", "READY=1 comes with the first STATUS=")

        // STATUS= follows a change, not a timer.
        let client = try RawClient(path: daemon.socketPath)
        #expect(
            try client.call(Tokens.addCall(user: "alice", access: Tokens.random("a-"), refresh: "r", expiresIn: 3600))
                .errorName == nil)
        #expect(
            await notify.waitFor {
                $0.contains {
                    $0["STATUS"]?.hasPrefix("serving 1 credential, 0 need reauthentication, next refresh ") == true
                }
            },
            "\(notify.messages)")
        let status = try #require(notify.messages.last { $0["STATUS"] != nil }?["STATUS"])
        #expect(status.range(of: #"next refresh \d\d:\d\d:\d\d$"#, options: .regularExpression) != nil, "\(status)")

        // WATCHDOG=1 at half of WATCHDOG_USEC.
        #expect(await notify.waitFor { $0.filter { $0["WATCHDOG"] == "1" }.count >= 3 }, "\(notify.messages)")

        // SIGHUP: RELOADING=1 with MONOTONIC_USEC, then READY=1.
        let before = monotonicMicroseconds()
        kill(daemon.process.processIdentifier, SIGHUP)
        #expect(
            await notify.waitFor { messages in
                guard let reloading = Self.index(of: "RELOADING", in: messages) else { return false }
                return Self.index(of: "READY", in: messages, after: reloading) != nil
            }, "\(notify.messages)")
        let reloading = try #require(notify.messages.first { $0["RELOADING"] == "1" })
        let stamp = try #require(reloading["MONOTONIC_USEC"].flatMap(UInt64.init))
        #expect(stamp >= before && stamp <= monotonicMicroseconds())
        #expect(daemon.log.contains("configuration reloaded"))

        // SIGTERM: STOPPING=1 and a clean exit.
        #expect(try await daemon.stop() == 0)
        let messages = notify.messages
        let order = ["READY", "RELOADING", "STOPPING"].map { Self.index(of: $0, in: messages) }
        #expect(order.allSatisfy { $0 != nil } && order == order.sorted { $0! < $1! }, "\(messages)")
        let secondReady = Self.index(of: "READY", in: messages, after: Self.index(of: "RELOADING", in: messages))
        #expect(secondReady != nil && secondReady! < Self.index(of: "STOPPING", in: messages)!)
        #expect(!messages.contains { $0["STATUS"]?.contains("\n") == true })
    }

    @Test func aBlockedDaemonStopsSendingWatchdogPings() async throws {
        let (_, notify, daemon) = try await Self.startWithNotifySocket(["WATCHDOG_USEC": "400000"])
        #expect(await notify.waitFor { $0.filter { $0["WATCHDOG"] == "1" }.count >= 2 })

        let pid = daemon.process.processIdentifier
        kill(pid, SIGSTOP)
        #expect(await Self.eventually { Self.processState(pid) == "T" }, "the daemon is stopped")
        try await Task.sleep(for: .milliseconds(300))  // what was sent before arrives
        let frozen = notify.count(of: "WATCHDOG")
        // Three timeouts' worth (1.2 s): systemd would have restarted it.
        try await Task.sleep(for: .milliseconds(1200))
        #expect(notify.count(of: "WATCHDOG") == frozen, "no WATCHDOG=1 while the daemon cannot run")
        kill(pid, SIGCONT)
        #expect(await notify.waitFor(timeout: .seconds(15)) { $0.filter { $0["WATCHDOG"] == "1" }.count > frozen })
        #expect(try await daemon.stop() == 0)
    }

    @Test func noWatchdogPingsForAnotherProcess() async throws {
        let directory = try ScratchDirectory()
        let notify = try DatagramListener(path: directory.file("notify.sock"))
        let daemon = try DaemonProcess(directory: directory)
        // WATCHDOG_PID names another process: the watchdog is not ours to feed.
        daemon.process.environment = Self.environment([
            "NOTIFY_SOCKET": notify.path, "WATCHDOG_USEC": "200000", "WATCHDOG_PID": "1",
        ])
        try await daemon.start()
        #expect(await notify.waitFor { $0.contains { $0["READY"] == "1" } })
        try await Task.sleep(for: .milliseconds(500))
        #expect(notify.count(of: "WATCHDOG") == 0)
        #expect(try await daemon.stop() == 0)
    }

    // MARK: Socket activation

    @Test func servesOnTheSocketSystemdSocketActivatePasses() async throws {
        let directory = try ScratchDirectory()
        try directory.write("tokend.toml", DaemonProcess.configuration())
        try directory.write("client-secret", "test-client-secret\n", mode: 0o600)
        let notify = try DatagramListener(path: directory.file("notify.sock"))
        let passedPath = directory.file("activated.sock")
        let daemon = try LaunchedProcess(
            directory: directory, executable: "/usr/bin/systemd-socket-activate",
            arguments: [
                "-l", passedPath, "-E", "NOTIFY_SOCKET=\(notify.path)", Repository.binary("tokend"), "--config",
                directory.file("tokend.toml"),
            ]
        )
        // systemd-socket-activate starts tokend at the first connection, as systemd does. Its file
        // appears at bind, before it listens: wait until it accepts.
        let deadline = ContinuousClock.now + .seconds(10)
        while !RawClient.canConnect(passedPath), ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(20))
        }
        let client = try RawClient(path: passedPath)
        #expect(await notify.waitFor { $0.contains { $0["READY"] == "1" } }, "\(daemon.log)")

        let info = try client.call(#"{"method":"org.varlink.service.GetInfo"}"#)
        #expect(info.parameters["product"] as? String == "tokend")
        let access = Tokens.random("activated-")
        #expect(try client.call(Tokens.addCall(user: "bob", access: access, refresh: "r")).errorName == nil)
        #expect(try client.call(Tokens.tokenCall(user: "bob")).accessToken == access)
        #expect(daemon.log.contains("socket activation"))
        #expect(!FileManager.default.fileExists(atPath: directory.file("tokend.sock")), "no socket of its own is bound")

        #expect(try await daemon.stop() == 0)
        #expect(notify.messages.contains { $0["STOPPING"] == "1" })
        // The passed socket belongs to whoever created it: tokend leaves the file alone.
        var info2 = stat()
        #expect(lstat(passedPath, &info2) == 0 && (info2.st_mode & S_IFMT) == S_IFSOCK)
    }

    /// The test process keeps reaping its other children while systemd-socket-activate runs.
    /// It closes every descriptor it did not create, among them the one through which Foundation
    /// watches a child; when Foundation started it, no other child was reaped until it ended, and
    /// the suite hung in the next `waitUntilExit()`.
    @Test func otherChildrenAreReapedWhileSystemdSocketActivateRuns() async throws {
        let directory = try ScratchDirectory()
        let passedPath = directory.file("activated.sock")
        let activator = try LaunchedProcess(
            directory: directory, executable: "/usr/bin/systemd-socket-activate",
            arguments: ["-l", passedPath, "/bin/true"])
        // Its file appears at bind, after it has closed what it inherited; no connection, so it
        // keeps waiting.
        try await pollUntil(timeout: .seconds(10), "systemd-socket-activate binds") {
            FileManager.default.fileExists(atPath: passedPath)
        }
        let other = try await runCommand("/bin/true", [], timeout: .seconds(10))
        #expect(other.status == 0)
        #expect(activator.process.isRunning, "it waits for a first connection: \(activator.log)")
        _ = try await activator.stop(signal: SIGKILL)
    }

    // MARK: Reload

    @Test func reloadAddsAProviderWithoutDroppingConnectionsOrCredentials() async throws {
        let (directory, notify, daemon) = try await Self.startWithNotifySocket()
        let client = try RawClient(path: daemon.socketPath)
        let access = Tokens.random("kept-")
        #expect(try client.call(Tokens.addCall(user: "alice", access: access, refresh: "r")).errorName == nil)
        let unknown = try client.call(
            Tokens.addCall(user: "carol", access: Tokens.random("c-"), refresh: "r", provider: "second"))
        #expect(unknown.errorName == "io.tokend.TokenProvider.UnknownProvider")

        let command = try ExecProviderTests.script(
            in: directory, name: "second-refresh",
            output: #"json.dumps({"access_token": "second-" + str(now), "expires_in": 3600})"#)
        try directory.write(
            "tokend.toml",
            DaemonProcess.configuration(
                providers: DaemonProcess.defaultProviders + """


                    [providers.second]
                    kind = "exec"
                    command = ["\(command)"]
                    """))
        try await reload(daemon, notify)
        #expect(daemon.log.contains("configuration reloaded"))
        #expect(daemon.log.contains("providers_added=second"))

        // The same connection, still open; the old credential, still served.
        #expect(
            try client.call(
                Tokens.addCall(user: "carol", access: Tokens.random("c-"), refresh: "r", provider: "second")
            ).errorName == nil)
        #expect(try client.call(Tokens.tokenCall(user: "alice")).accessToken == access)
        #expect(try await daemon.stop() == 0)
    }

    @Test func aBrokenConfigurationIsRejectedAndTheRunningOneStays() async throws {
        let (directory, notify, daemon) = try await Self.startWithNotifySocket()
        let client = try RawClient(path: daemon.socketPath)

        try directory.write("tokend.toml", DaemonProcess.configuration(extraDaemon: "max_connections = \"many\""))
        try await reload(daemon, notify)
        let failures = daemon.log.split(separator: "\n").filter { $0.contains("reloading the configuration failed") }
        #expect(failures.count == 1, "\(daemon.log)")
        #expect(
            failures.first?.contains("tokend.toml: daemon.max_connections: expected an integer") == true, "\(failures)")
        #expect(!daemon.log.contains("configuration reloaded"))

        // The old configuration is in force: its provider still works, on the same connection.
        #expect(
            try client.call(Tokens.addCall(user: "dave", access: Tokens.random("d-"), refresh: "r")).errorName == nil)
        #expect(try await daemon.stop() == 0)
    }

    /// Sends SIGHUP and waits for the `READY=1` that ends the reload.
    /// Sends SIGHUP and waits for the READY=1 that follows its RELOADING=1. (Counting READY
    /// messages is not enough: the start's READY=1 may still be on its way when the socket
    /// already accepts connections.)
    private func reload(_ daemon: DaemonProcess, _ notify: DatagramListener) async throws {
        let reloads = notify.count(of: "RELOADING")
        kill(daemon.process.processIdentifier, SIGHUP)
        let done = await notify.waitFor { messages in
            let reloading = messages.indices.filter { messages[$0]["RELOADING"] != nil }
            guard reloading.count > reloads else { return false }
            return messages[(reloading[reloads] + 1)...].contains { $0["READY"] == "1" }
        }
        try #require(done, "no RELOADING=1 … READY=1 after SIGHUP: \(notify.messages)\n\(daemon.log)")
    }

    // MARK: Graceful stop

    @Test func sigtermDuringARefreshStillAnswersTheCallerAndKeepsTheNewToken() async throws {
        let directory = try ScratchDirectory()
        let notify = try DatagramListener(path: directory.file("notify.sock"))
        let command = try ExecProviderTests.script(
            in: directory, sleep: 2,
            output: #"json.dumps({"access_token": "after-stop-" + str(now), "expires_in": 3600})"#)
        let configuration = DaemonProcess.configuration(
            // Generous limits, so a loaded machine cannot turn the stop into a timeout: the test
            // checks that the stop waits for the refresh (2 s) and no longer than it needs.
            extraDaemon: #"call_timeout = "60s""# + "\n" + #"shutdown_timeout = "60s""#,
            providers: """
                [providers.example]
                kind = "exec"
                command = ["\(command)"]
                timeout = "60s"
                """)
        let daemon = try DaemonProcess(configuration: configuration, directory: directory)
        daemon.process.environment = Self.environment(["NOTIFY_SOCKET": notify.path])
        try await daemon.start()
        let client = try RawClient(path: daemon.socketPath)
        #expect(
            try client.call(Tokens.addCall(user: "ex", access: Tokens.random("old-"), refresh: "r", expiresIn: 120))
                .errorName == nil)

        let socketPath = daemon.socketPath
        let caller = Task {
            try await onOwnThread { () throws -> (token: String?, error: String?) in
                let waiting = try RawClient(path: socketPath)
                let reply = try waiting.call(Tokens.tokenCall(user: "ex", minValid: 600))
                return (reply.accessToken, reply.errorName)
            }
        }
        // The refresh command has started (it records its call, then sleeps 2 s).
        let calls = directory.file("refresh.calls")
        let deadline = ContinuousClock.now + .seconds(10)
        while !FileManager.default.fileExists(atPath: calls), ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(20))
        }
        try #require(FileManager.default.fileExists(atPath: calls))

        let stopped = ContinuousClock.now
        kill(daemon.process.processIdentifier, SIGTERM)
        #expect(await notify.waitFor { $0.contains { $0["STOPPING"] == "1" } })
        #expect(await Self.eventually { !RawClient.canConnect(socketPath) }, "no new connections once stopping")

        let answer = try await caller.value
        #expect(answer.error == nil, "\(answer)")
        #expect(answer.token?.hasPrefix("after-stop-") == true, "\(answer)")
        #expect(try await daemon.stop(timeout: .seconds(60)) == 0)
        // Ended by the refresh finishing, not by shutdown_timeout (60 s).
        #expect(ContinuousClock.now - stopped < .seconds(30))

        // The refreshed token was committed before the store closed.
        let again = try DaemonProcess(configuration: configuration, directory: directory)
        try await again.start()
        #expect(try RawClient(path: again.socketPath).call(Tokens.tokenCall(user: "ex")).accessToken == answer.token)
        #expect(try await again.stop() == 0)
    }

    @Test func aWatchingClientDoesNotHoldUpAStop() async throws {
        let daemon = try DaemonProcess()
        try await daemon.start()
        let client = try RawClient(path: daemon.socketPath)
        #expect(try client.call(Tokens.addCall(user: "alice", access: Tokens.random("w-"), refresh: "r")).errorName == nil)
        let watcher = try RawClient(path: daemon.socketPath)
        try watcher.send(#"{"method":"io.tokend.TokenProvider.Watch","parameters":{"userIdentifier":"alice"},"more":true}"#)
        let first = try #require(try watcher.receive())
        #expect(first.contains(#""continues":true"#))

        let stopped = ContinuousClock.now
        #expect(try await daemon.stop() == 0)
        // Well within shutdown_timeout (10 s): the stream ends with the connection.
        #expect(ContinuousClock.now - stopped < .seconds(5))
        #expect(try watcher.receive() == nil)
    }

    // MARK: Metrics

    @Test(arguments: ["tcp", "unix"])
    func metricsAreScrapedAndWrittenToTheTextfile(transport: String) async throws {
        let directory = try ScratchDirectory()
        let port = try FreePort.pick()
        let listen = transport == "tcp" ? "127.0.0.1:\(port)" : "unix:metrics.sock"
        // A refresh command that fails: a transient failure, at once.
        let command = try ExecProviderTests.script(in: directory, exitCode: 1, output: "'oops'")
        let daemon = try DaemonProcess(
            configuration: ExecProviderTests.config(command: command) + """

                [metrics]
                listen = "\(listen)"
                textfile = "tokend.prom"
                """, directory: directory)
        try await daemon.start()
        let client = try RawClient(path: daemon.socketPath)
        _ = try client.call(#"{"method":"org.varlink.service.GetInfo"}"#)
        #expect(
            try client.call(Tokens.tokenCall(user: "nobody-here")).errorName == "io.tokend.TokenProvider.UnknownUser")
        #expect(
            try client.call(Tokens.addCall(user: "alice", access: Tokens.random("m-"), refresh: "r")).errorName == nil)
        for _ in 0..<3 { #expect(try client.call(Tokens.tokenCall(user: "alice")).accessToken != nil) }

        let scrape =
            transport == "tcp"
            ? try httpGet(port: port, path: "/metrics")
            : try httpGet(unixSocket: directory.file("metrics.sock"), path: "/metrics")
        #expect(scrape.status == 200)
        #expect(scrape.contentType.hasPrefix("text/plain; version=0.0.4"))
        let samples = try PrometheusText.parse(scrape.body)
        #expect(
            samples[#"tokend_requests_total{method="ProvideTokenReplacement",error="none"}"#] == 3, "\(scrape.body)")
        #expect(
            samples[
                #"tokend_requests_total{method="ProvideTokenReplacement",error="io.tokend.TokenProvider.UnknownUser"}"#]
                == 1)
        #expect(samples[#"tokend_requests_total{method="GetInfo",error="none"}"#] == 1)
        #expect(samples[#"tokend_requests_total{method="AddCredential",error="none"}"#] == 1)
        #expect(samples[#"tokend_credentials{state="valid"}"#] == 1)
        #expect(samples[#"tokend_credentials{state="reauthentication_required"}"#] == 0)
        #expect(samples["tokend_connections"] == 1)
        #expect(samples["tokend_connections_accepted_total"] ?? 0 >= 1)
        #expect(samples["tokend_next_refresh_seconds"] ?? -1 > 0)
        #expect(samples[#"tokend_grants_total{provider="example",outcome="success"}"#] == 0)
        #expect(samples[#"tokend_grant_duration_seconds_count{provider="example"}"#] == 0)
        #expect(scrape.body.contains("# TYPE tokend_grant_duration_seconds histogram"))

        // A failing grant shows up by provider and outcome, with its latency.
        #expect(
            try client.call(Tokens.tokenCall(user: "alice", minValid: 7200)).errorName
                == "io.tokend.TokenProvider.RefreshFailed")
        let after = try PrometheusText.parse(
            (transport == "tcp"
                ? try httpGet(port: port, path: "/metrics")
                : try httpGet(unixSocket: directory.file("metrics.sock"), path: "/metrics")).body)
        #expect(after[#"tokend_grants_total{provider="example",outcome="transient"}"#] == 1)
        #expect(after[#"tokend_grant_duration_seconds_count{provider="example"}"#] == 1)
        #expect(after[#"tokend_credentials{state="retrying"}"#] == 1)
        #expect(
            after[
                #"tokend_requests_total{method="ProvideTokenReplacement",error="io.tokend.TokenProvider.RefreshFailed"}"#
            ] == 1)

        let notFound =
            transport == "tcp"
            ? try httpGet(port: port, path: "/nothing")
            : try httpGet(unixSocket: directory.file("metrics.sock"), path: "/nothing")
        #expect(notFound.status == 404)

        // The textfile catches up with the change, written atomically (never half a file).
        let textfile = directory.file("tokend.prom")
        var fileSamples: [String: Double] = [:]
        let deadline = ContinuousClock.now + .seconds(10)
        while ContinuousClock.now < deadline {
            if let text = try? String(contentsOfFile: textfile, encoding: .utf8),
                let parsed = try? PrometheusText.parse(text),
                parsed[#"tokend_credentials{state="retrying"}"#] == 1
            {
                fileSamples = parsed
                break
            }
            try await Task.sleep(for: .milliseconds(100))
        }
        #expect(
            fileSamples[#"tokend_credentials{state="retrying"}"#] == 1,
            "\((try? String(contentsOfFile: textfile, encoding: .utf8)) ?? "no file")")
        let leftovers = try FileManager.default.contentsOfDirectory(atPath: directory.path).filter {
            $0.hasSuffix(".tmp")
        }
        #expect(leftovers.isEmpty)
        #expect(try await daemon.stop() == 0)
        if transport == "unix" { #expect(!FileManager.default.fileExists(atPath: directory.file("metrics.sock"))) }
    }

    @Test func metricsAreOffByDefault() async throws {
        let daemon = try DaemonProcess()
        try await daemon.start()
        #expect(!daemon.log.contains("metrics endpoint listening"))
        #expect(try await daemon.stop() == 0)
    }

    // MARK: Journal

    @Test(.enabled(if: SystemdIntegrationTests.canUnshareMountNamespace, "needs root and unshare -m"))
    func logsStructuredFieldsToTheJournal() async throws {
        let directory = try ScratchDirectory()
        let command = try ExecProviderTests.script(in: directory, exitCode: 1, output: "'oops'")
        try directory.write(
            "tokend.toml", ExecProviderTests.config(command: command, daemonExtra: #"log_level = "info""#))
        try directory.write("client-secret", "test-client-secret\n", mode: 0o600)
        let journal = try DatagramListener(path: directory.file("journal.sock"))
        // In a private mount namespace, our socket is where libsystemd sends journal entries.
        let script =
            #"mount -t tmpfs tmpfs /run && mkdir -p /run/systemd/journal && touch /run/systemd/journal/socket && mount --bind "$0" /run/systemd/journal/socket && exec "$@""#
        let daemon = try LaunchedProcess(
            directory: directory, executable: "/usr/bin/unshare",
            arguments: [
                "-m", "sh", "-c", script, journal.path, Repository.binary("tokend"), "--config",
                directory.file("tokend.toml"),
            ],
            journalStream: true
        )
        let socketPath = directory.file("tokend.sock")
        let deadline = ContinuousClock.now + .seconds(20)
        while !RawClient.canConnect(socketPath), ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(50))
        }
        let client = try RawClient(path: socketPath)
        #expect(
            try client.call(Tokens.addCall(user: "alice", access: Tokens.random("j-"), refresh: "r")).errorName == nil)
        // The refresh command fails: the refresh is retried later (credential_state).
        #expect(
            try client.call(Tokens.tokenCall(user: "alice", minValid: 7200)).errorName
                == "io.tokend.TokenProvider.RefreshFailed")

        #expect(
            await journal.waitFor(raw: true) { entries in
                entries.contains { $0["MESSAGE"]?.hasPrefix("refresh failed; will retry") == true }
            },
            "\(journal.entries) \(daemon.log)")
        let entries = journal.entries
        let ready = try #require(entries.first { $0["MESSAGE"]?.hasPrefix("tokend ready") == true })
        #expect(ready["PRIORITY"] == "5")
        #expect(ready["SYSLOG_IDENTIFIER"] == "tokend")
        #expect(ready["SOCKET"] == socketPath)

        let added = try #require(entries.first { $0["MESSAGE"]?.hasPrefix("credential added") == true })
        #expect(added["PRIORITY"] == "6")
        #expect(added["USER_IDENTIFIER"] == "alice")
        #expect(added["PROVIDER"] == "example")
        #expect(added["UID"] == "0")
        #expect(added["CODE_FILE"]?.hasSuffix("CredentialRegistry+Enrolment.swift") == true, "\(added)")
        #expect(Int(added["CODE_LINE"] ?? "") ?? 0 > 0)
        #expect(added["CODE_FUNC"]?.hasPrefix("add(") == true, "\(added)")
        #expect(added["MESSAGE"]?.contains("user_identifier=alice") == true)

        let retry = try #require(entries.first { $0["MESSAGE"]?.hasPrefix("refresh failed; will retry") == true })
        #expect(retry["PRIORITY"] == "4")
        #expect(retry["CREDENTIAL_STATE"] == "retrying")
        #expect(retry["USER_IDENTIFIER"] == "alice")

        #expect(try await daemon.stop() == 0)
        // stderr is the journal here: nothing went to it as plain lines.
        #expect(!daemon.log.contains("credential added"), "\(daemon.log)")
    }

    static let canUnshareMountNamespace: Bool = {
        guard geteuid() == 0, FileManager.default.isExecutableFile(atPath: "/usr/bin/unshare") else { return false }
        let probe = Process()
        probe.executableURL = URL(fileURLWithPath: "/usr/bin/unshare")
        probe.arguments = ["-m", "sh", "-c", "mount -t tmpfs tmpfs /run"]
        probe.standardError = FileHandle.nullDevice
        guard (try? probe.run()) != nil else { return false }
        probe.waitUntilExit()
        return probe.terminationStatus == 0
    }()

    // MARK: Units

    @Test func unitsPassVerifyAndTheSecurityLimit() async throws {
        let binDirectory = URL(fileURLWithPath: Repository.binary("tokend")).deletingLastPathComponent().path
        let result = try await runCommand(
            "/bin/bash", [Repository.root + "/scripts/check-units", binDirectory], timeout: .seconds(60))
        #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
        #expect(result.stdout.contains("verify OK"))
    }

    // MARK: Helpers

    /// Polls `condition` until it holds or `timeout` passes.
    static func eventually(timeout: Duration = .seconds(10), _ condition: () -> Bool) async -> Bool {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if condition() { return true }
            try? await Task.sleep(for: .milliseconds(10))
        }
        return condition()
    }

    /// The state letter of a process in /proc (R, S, T for stopped, …).
    static func processState(_ pid: Int32) -> String? {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
            let close = stat.lastIndex(of: ")")
        else { return nil }
        return stat[stat.index(after: close)...].split(separator: " ").first.map(String.init)
    }

    /// A started daemon in a new scratch directory that notifies a `NOTIFY_SOCKET` the test
    /// listens on, with `extra` in its environment.
    static func startWithNotifySocket(_ extra: [String: String] = [:]) async throws -> (ScratchDirectory, DatagramListener, DaemonProcess) {
        let directory = try ScratchDirectory()
        let notify = try DatagramListener(path: directory.file("notify.sock"))
        let daemon = try DaemonProcess(directory: directory)
        daemon.process.environment = environment(extra.merging(["NOTIFY_SOCKET": notify.path]) { $1 })
        try await daemon.start()
        return (directory, notify, daemon)
    }

    static func environment(_ extra: [String: String]) -> [String: String] {
        var environment = ProcessInfo.processInfo.environment
        for key in [
            "NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES",
            "JOURNAL_STREAM",
        ] {
            environment.removeValue(forKey: key)
        }
        return environment.merging(extra) { _, new in new }
    }

    /// The index of the first message with `NAME=…` after `after`.
    static func index(of name: String, in messages: [[String: String]], after: Int? = nil) -> Int? {
        let start = after.map { $0 + 1 } ?? 0
        guard start <= messages.count else { return nil }
        return messages[start...].firstIndex { $0[name] != nil }
    }
}

// MARK: - Test helpers (this file only)

func monotonicMicroseconds() -> UInt64 {
    var spec = timespec()
    clock_gettime(CLOCK_MONOTONIC, &spec)
    return UInt64(spec.tv_sec) * 1_000_000 + UInt64(spec.tv_nsec) / 1000
}

/// A Unix datagram socket that collects what is sent to it (sd_notify messages, journal
/// entries) on its own thread.
final class DatagramListener: Sendable {
    let path: String
    private let fd: Int32
    private let received = Mutex<[[UInt8]]>([])
    private let stopped = Atomic<Bool>(false)
    private let exited = Atomic<Bool>(false)

    init(path: String) throws {
        self.path = path
        unlink(path)
        fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw TestFailure("socket() failed") }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in raw.copyBytes(from: path.utf8.prefix(raw.count - 1)) }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        guard bound == 0 else { throw TestFailure("bind(\(path)) failed: errno \(errno)") }
        chmod(path, 0o666)
        var timeout = timeval(tv_sec: 0, tv_usec: 50_000)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var size: Int32 = 4 << 20
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
        let thread = Thread { [self] in
            var buffer = [UInt8](repeating: 0, count: 256 * 1024)
            while !stopped.load(ordering: .relaxed) {
                let count = recv(fd, &buffer, buffer.count, 0)
                if count > 0 {
                    let message = Array(buffer[..<count])
                    received.withLock { $0.append(message) }
                }
            }
            exited.store(true, ordering: .relaxed)
        }
        thread.start()
    }

    deinit {
        stopped.store(true, ordering: .relaxed)
        let deadline = ContinuousClock.now + .seconds(1)
        while !exited.load(ordering: .relaxed), ContinuousClock.now < deadline { usleep(5000) }
        close(fd)
        unlink(path)
    }

    /// sd_notify messages, each as its `NAME=value` assignments.
    var messages: [[String: String]] {
        received.withLock { $0 }.map { datagram in
            var assignments: [String: String] = [:]
            for line in String(decoding: datagram, as: UTF8.self).split(separator: "\n") {
                guard let equals = line.firstIndex(of: "=") else { continue }
                assignments[String(line[..<equals])] = String(line[line.index(after: equals)...])
            }
            return assignments
        }
    }

    /// Journal entries, decoded from the native protocol (`NAME=value\n`, or `NAME\n`, a 64-bit
    /// little-endian length, the value and `\n`).
    var entries: [[String: String]] {
        received.withLock { $0 }.map(Self.journalEntry)
    }

    static func journalEntry(_ datagram: [UInt8]) -> [String: String] {
        var fields: [String: String] = [:]
        var index = 0
        while index < datagram.count {
            guard
                let end = datagram[index...].firstIndex(where: { $0 == UInt8(ascii: "=") || $0 == UInt8(ascii: "\n") })
            else { break }
            let name = String(decoding: datagram[index..<end], as: UTF8.self)
            if datagram[end] == UInt8(ascii: "=") {
                let valueEnd = datagram[(end + 1)...].firstIndex(of: UInt8(ascii: "\n")) ?? datagram.count
                fields[name] = String(decoding: datagram[(end + 1)..<valueEnd], as: UTF8.self)
                index = valueEnd + 1
            } else {
                guard end + 9 <= datagram.count else { break }
                var length: UInt64 = 0
                for (shift, byte) in datagram[(end + 1)..<(end + 9)].enumerated() {
                    length |= UInt64(byte) << (8 * UInt64(shift))
                }
                let valueStart = end + 9
                let valueEnd = min(datagram.count, valueStart + Int(length))
                fields[name] = String(decoding: datagram[valueStart..<valueEnd], as: UTF8.self)
                index = valueEnd + 1
            }
        }
        return fields
    }

    func count(of name: String) -> Int { messages.filter { $0[name] != nil }.count }

    /// Polls until `condition` holds for what has arrived (sd_notify messages, or journal
    /// entries with `raw`), or `timeout` passes.
    func waitFor(timeout: Duration = .seconds(15), raw: Bool = false, _ condition: ([[String: String]]) -> Bool) async
        -> Bool
    {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if condition(raw ? entries : messages) { return true }
            try? await Task.sleep(for: .milliseconds(25))
        }
        return condition(raw ? entries : messages)
    }
}

/// tokend started through another program (systemd-socket-activate, unshare), which execs it,
/// so the process id is tokend's.
///
/// Spawned out of Foundation's sight (`SpawnedProcess`): systemd-socket-activate closes every
/// descriptor it did not create, and a Foundation `Process` would then stop reaping every other
/// child of the test process.
final class LaunchedProcess: Sendable {
    let process: SpawnedProcess
    let logPath: String

    init(directory: ScratchDirectory, executable: String, arguments: [String], journalStream: Bool = false) throws {
        logPath = directory.file("tokend.log")
        _ = FileManager.default.createFile(atPath: logPath, contents: nil)
        var environment = SystemdIntegrationTests.environment([:])
        if journalStream {
            // What systemd sets when stdout/stderr are connected to the journal: here, the log file.
            var info = stat()
            guard stat(logPath, &info) == 0 else { throw TestFailure("stat(\(logPath)) failed") }
            environment["JOURNAL_STREAM"] = "\(info.st_dev):\(info.st_ino)"
        }
        process = try SpawnedProcess(executable, arguments, environment: environment, outputPath: logPath)
    }

    var log: String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }

    func stop(signal: Int32 = SIGTERM, timeout: Duration = .seconds(20)) async throws -> Int32 {
        do {
            return try await process.terminate(signal: signal, timeout: timeout)
        } catch let failure as SpawnedProcess.Failure {
            throw TestFailure(failure.description)
        }
    }
}

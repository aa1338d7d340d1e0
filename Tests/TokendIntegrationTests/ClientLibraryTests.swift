import Foundation
import Testing
import TokendClient

/// The Swift client library and `tokenctl watch`/`exec` against the real daemon binary.
@Suite(.serialized)
struct ClientLibraryTests {
    static func replaceCall(user: String, access: String, expiresIn: Int = 3600) throws -> String {
        var call = try RawClient.object(Tokens.addCall(user: user, access: access, refresh: nil, expiresIn: expiresIn))
        var parameters = call["parameters"] as! [String: Any]
        parameters["replace"] = true
        call["parameters"] = parameters
        return String(decoding: try JSONSerialization.data(withJSONObject: call), as: UTF8.self)
    }

    static let removeCall = #"{"method":"io.tokend.TokenProvider.RemoveCredential","parameters":{"userIdentifier":"w"}}"#

    // MARK: Completion handler: exactly once in every case

    @Test func completionIsCalledOnceWithTheCredentials() async throws {
        let daemon = try DaemonProcess()
        try await daemon.start()
        let admin = try RawClient(path: daemon.socketPath)
        let token = Tokens.random("once-")
        #expect(try admin.call(Tokens.addCall(user: "alice", access: token, refresh: nil)).errorName == nil)
        let client = TokendClient(socketPath: daemon.socketPath)

        let recorder = CompletionRecorder()
        client.provideTokenReplacement(userIdentifier: "alice", completion: recorder.handler)
        let result = try await recorder.expectExactlyOnce()
        #expect(result.credentials?.accessToken == token)

        // The seed's (Credentials?, Error?) shape, through the protocol.
        let provider: any TokenProvider = client
        let seedRecorder = CompletionRecorder()
        provider.provideTokenReplacement(userIdentifier: "alice", completion: seedRecorder.tupleHandler)
        #expect(try await seedRecorder.expectExactlyOnce().credentials?.accessToken == token)
        await client.close()
        try await daemon.stop()
    }

    @Test func completionIsCalledOnceForAnUnknownUser() async throws {
        let daemon = try DaemonProcess()
        try await daemon.start()
        let client = TokendClient(socketPath: daemon.socketPath)
        let recorder = CompletionRecorder()
        client.provideTokenReplacement(userIdentifier: "nobody-here", completion: recorder.handler)
        let result = try await recorder.expectExactlyOnce()
        #expect(result.clientErrorCode == .unknownUser)
        if case .failure(let error) = result { #expect("\(error)".contains("nobody-here")) }
        await client.close()
        try await daemon.stop()
    }

    @Test func completionIsCalledOnceWhenTheDaemonIsNotRunning() async throws {
        let directory = try ScratchDirectory()
        let client = TokendClient(socketPath: directory.file("tokend.sock"))
        let recorder = CompletionRecorder()
        client.provideTokenReplacement(userIdentifier: "alice", completion: recorder.handler)
        #expect(try await recorder.expectExactlyOnce().clientErrorCode == .daemonUnavailable)
    }

    @Test func completionIsCalledOnceWhenTheDaemonIsKilledAndRestartedMidCall() async throws {
        let directory = try ScratchDirectory()
        let command = try SlowRefresher.install(in: directory, sleep: 8)
        let configuration = SlowRefresher.configuration(command: command)
        let daemon = try DaemonProcess(configuration: configuration, directory: directory)
        try await daemon.start()
        let admin = try RawClient(path: daemon.socketPath)
        let token = Tokens.random("before-crash-")
        #expect(try admin.call(Tokens.addCall(user: "k", access: token, refresh: "r", expiresIn: 120)).errorName == nil)

        let client = TokendClient(socketPath: daemon.socketPath, callTimeout: .seconds(20))
        let recorder = CompletionRecorder()
        // Needs 10 minutes from a 2-minute token: the daemon refreshes, which takes 8 s.
        client.provideTokenReplacement(userIdentifier: "k", minValidity: .seconds(600), completion: recorder.handler)
        try await SlowRefresher.waitUntilStarted(directory, user: "k")
        #expect(recorder.count == 0, "the call is in flight")
        try await daemon.stop(signal: SIGKILL)
        let restarted = try DaemonProcess(configuration: configuration, directory: directory)
        try await restarted.start()

        let result = try await recorder.expectExactlyOnce()
        #expect(result.clientErrorCode == .daemonUnavailable, "\(result)")
        // The same client reconnects to the new daemon on its next call: the token before the
        // crash, or the one the restarted daemon's recovery grant got meanwhile on a slow machine.
        let again = CompletionRecorder()
        client.provideTokenReplacement(userIdentifier: "k", completion: again.handler)
        let answer = try await again.expectExactlyOnce()
        #expect(answer.credentials?.accessToken != nil, "\(answer)")
        await client.close()
        try await restarted.stop()
    }

    @Test func completionIsCalledOnceOnTimeout() async throws {
        let directory = try ScratchDirectory()
        let command = try SlowRefresher.install(in: directory, sleep: 5)
        let daemon = try DaemonProcess(configuration: SlowRefresher.configuration(command: command), directory: directory)
        try await daemon.start()
        let admin = try RawClient(path: daemon.socketPath)
        #expect(try admin.call(Tokens.addCall(user: "t", access: Tokens.random("t-"), refresh: "r", expiresIn: 120)).errorName == nil)

        let client = TokendClient(socketPath: daemon.socketPath, callTimeout: .milliseconds(500))
        let recorder = CompletionRecorder()
        client.provideTokenReplacement(userIdentifier: "t", minValidity: .seconds(600), completion: recorder.handler)
        let result = try await recorder.expectExactlyOnce(settle: .seconds(3))
        #expect(result.clientErrorCode == .timeout, "\(result)")
        await client.close()
        try await daemon.stop()
    }

    @Test func completionIsCalledOnceOnCancellation() async throws {
        let directory = try ScratchDirectory()
        let command = try SlowRefresher.install(in: directory, sleep: 3)
        let daemon = try DaemonProcess(configuration: SlowRefresher.configuration(command: command), directory: directory)
        try await daemon.start()
        let admin = try RawClient(path: daemon.socketPath)
        for user in ["c1", "c2"] {
            #expect(try admin.call(Tokens.addCall(user: user, access: Tokens.random("c-"), refresh: "r", expiresIn: 120)).errorName == nil)
        }
        let client = TokendClient(socketPath: daemon.socketPath, callTimeout: .seconds(20))

        // Through the returned request: the handler runs before cancel() returns, and never
        // again when the daemon's late reply arrives (3 s refresh, 4 s wait).
        let recorder = CompletionRecorder()
        let request = client.provideTokenReplacement(userIdentifier: "c1", minValidity: .seconds(600), completion: recorder.handler)
        try await SlowRefresher.waitUntilStarted(directory, user: "c1")
        request.cancel()
        #expect(recorder.count == 1)
        request.cancel()
        let result = try await recorder.expectExactlyOnce(settle: .seconds(4))
        #expect(result.clientErrorCode == .cancelled)
        #expect(request.isCancelled && request.isCompleted)

        // Through Task cancellation of the async API.
        let task = Task { try await client.credentials(for: "c2", minValidity: .seconds(600)) }
        try await SlowRefresher.waitUntilStarted(directory, user: "c2")
        task.cancel()
        await #expect(throws: TokendClientError(code: .cancelled)) { try await task.value }

        // The shared connection stayed in step: the next call gets its own answer.
        let fresh = try await client.credentials(for: "c1", minValidity: .seconds(600))
        #expect(fresh.accessToken.hasPrefix("slow-c1-"))
        await client.close()
        try await daemon.stop()
    }

    // MARK: Cache

    @Test func cacheHitsMakeNoRoundTrip() async throws {
        let directory = try ScratchDirectory()
        let daemon = try DaemonProcess(configuration: DaemonProcess.configuration() + ScrapedMetrics.configuration, directory: directory)
        try await daemon.start()
        let admin = try RawClient(path: daemon.socketPath)
        let token = Tokens.random("cached-")
        #expect(try admin.call(Tokens.addCall(user: "alice", access: token, refresh: nil)).errorName == nil)
        // A wide safety margin, so the miss below does not depend on timing.
        let client = TokendClient(socketPath: daemon.socketPath, cachePolicy: CachePolicy(safetyMargin: .seconds(60)))

        let first = try await client.credentials(for: "alice", minValidity: .seconds(60))
        #expect(first.accessToken == token)
        #expect(client.statistics == .init(roundTrips: 1, cacheHits: 0))
        for _ in 0..<20 {
            #expect(try await client.credentials(for: "alice", minValidity: .seconds(60)).accessToken == token)
        }
        let completion = CompletionRecorder()
        client.provideTokenReplacement(userIdentifier: "alice", completion: completion.handler)
        #expect(try await completion.expectExactlyOnce(settle: .milliseconds(200)).credentials?.accessToken == token)
        #expect(client.statistics == .init(roundTrips: 1, cacheHits: 21))
        #expect(try ScrapedMetrics.scrape(directory)[ScrapedMetrics.tokensServed] == 1, "the daemon saw one call")

        // More validity than the cached token has beyond the margin: a round trip.
        let remaining = first.expiresAt - Int64(Date().timeIntervalSince1970)
        _ = try await client.credentials(for: "alice", minValidity: .seconds(remaining - 30))
        #expect(client.statistics.roundTrips == 2)

        // A rejected token drops the cached copy: the report goes to the daemon.
        _ = try? await client.credentials(for: "alice", rejectedToken: token)
        #expect(client.statistics.roundTrips == 3)
        #expect(try ScrapedMetrics.scrape(directory)[ScrapedMetrics.tokensServed] ?? 0 >= 2)

        // A removed credential is not served from the cache afterwards.
        let other = TokendClient(socketPath: daemon.socketPath)
        _ = try await other.credentials(for: "alice")
        try await other.removeCredential("alice")
        await #expect(throws: TokendClientError(code: .unknownUser)) { try await other.credentials(for: "alice") }
        await client.close()
        await other.close()
        try await daemon.stop()
    }

    @Test func aRejectedTokenLeadsToExactlyOneForcedRefresh() async throws {
        let setup = try await IdPDaemon.start()
        let admin = try RawClient(path: setup.daemon.socketPath)
        try await setup.addMinted("alice", client: admin)
        let client = TokendClient(socketPath: setup.daemon.socketPath)
        let before = try await setup.idp.postCount()

        let first = try await client.credentials(for: "alice")
        // The API says 401: one report, one refresh.
        let second = try await client.credentials(for: "alice", rejectedToken: first.accessToken)
        #expect(second.accessToken != first.accessToken)
        #expect(client.statistics.roundTrips == 2)
        // Other requests that were in flight with the old token report it too: it is stale, so
        // the cached new token answers, with no round trip and no refresh.
        for _ in 0..<5 {
            #expect(try await client.credentials(for: "alice", rejectedToken: first.accessToken).accessToken == second.accessToken)
        }
        #expect(client.statistics.roundTrips == 2)
        // Ten tasks refused the new token at once: the daemon refreshes once for all of them.
        try await Task.sleep(for: .milliseconds(1200))  // past forced_refresh_interval
        let tokens = try await withThrowingTaskGroup(of: String.self) { group in
            for _ in 0..<10 {
                group.addTask { try await client.credentials(for: "alice", rejectedToken: second.accessToken).accessToken }
            }
            return try await group.reduce(into: Set<String>()) { $0.insert($1) }
        }
        #expect(tokens.count == 1 && !tokens.contains(second.accessToken))
        // And from then on the cache answers.
        let roundTrips = client.statistics.roundTrips
        for _ in 0..<5 { _ = try await client.credentials(for: "alice") }
        #expect(client.statistics.roundTrips == roundTrips)
        #expect(try await setup.idp.postCount() == before + 2, "one forced refresh per rejected token")
        await client.close()
        try await setup.stop()
    }

    // MARK: updates(for:)

    @Test func updatesSeeARefreshByTheRealIdPAndResumeAfterARestart() async throws {
        let setup = try await IdPDaemon.start(idpOptions: .init(accessTokenLifetime: 5), providerExtra: "refresh_margin = \"1s\"")
        let admin = try RawClient(path: setup.daemon.socketPath)
        let minted = try await setup.addMinted("alice", lifetime: 5, client: admin)
        let before = try await setup.idp.postCount()
        let client = TokendClient(socketPath: setup.daemon.socketPath)

        let seen = UpdateLog()
        let consumer = Task {
            do {
                for try await credentials in client.updates(for: "alice") { seen.append(credentials) }
                seen.finish(nil)
            } catch {
                seen.finish(error)
            }
        }
        try await pollUntil(timeout: .seconds(60), "a refreshed token") { seen.tokens.count >= 2 }
        #expect(seen.tokens.first == minted["access_token"] as? String)
        #expect(try await setup.idp.postCount() > before, "the IdP issued the new token")

        // Restart the daemon: the stream reconnects and goes on with the next refresh.
        try await setup.daemon.stop()
        let countAtRestart = seen.tokens.count
        let restarted = try DaemonProcess(
            configuration: try String(contentsOfFile: setup.directory.file("tokend.toml"), encoding: .utf8),
            directory: setup.directory
        )
        try await restarted.start()
        try await pollUntil(timeout: .seconds(60), "a token after the restart") { seen.tokens.count > countAtRestart }
        let tokens = seen.tokens
        #expect(Set(tokens).count == tokens.count, "no token was delivered twice")
        #expect(seen.ended == nil, "the stream is still open")

        consumer.cancel()
        _ = await consumer.value
        try await restarted.stop()
        await setup.idp.stop()
    }

    @Test func updatesResumeAfterAKillWithoutRepeatingTheDeliveredToken() async throws {
        let directory = try ScratchDirectory()
        let configuration = DaemonProcess.configuration() + ScrapedMetrics.configuration
        let daemon = try DaemonProcess(configuration: configuration, directory: directory)
        try await daemon.start()
        var admin = try RawClient(path: daemon.socketPath)
        let first = Tokens.random("first-")
        #expect(try admin.call(Tokens.addCall(user: "w", access: first, refresh: nil)).errorName == nil)
        let client = TokendClient(socketPath: daemon.socketPath)

        let seen = UpdateLog()
        let consumer = Task {
            do {
                for try await credentials in client.updates(for: "w") { seen.append(credentials) }
                seen.finish(nil)
            } catch {
                seen.finish(error)
            }
        }
        try await pollUntil("the first token") { seen.tokens == [first] }
        try await daemon.stop(signal: SIGKILL)
        let restarted = try DaemonProcess(configuration: configuration, directory: directory)
        try await restarted.start()
        // The stream subscribes again; the daemon's first reply is the token already delivered.
        // (The killed daemon left metrics.sock behind: until the new one listens, a scrape is refused.)
        try await pollUntil("a new Watch") { (try? ScrapedMetrics.scrape(directory))?[ScrapedMetrics.watches] == 1 }
        admin = try RawClient(path: restarted.socketPath)
        let second = Tokens.random("second-")
        #expect(try admin.call(Self.replaceCall(user: "w", access: second)).errorName == nil)
        try await pollUntil("the replacement") { seen.tokens.count == 2 }
        #expect(seen.tokens == [first, second])
        // Removal ends the stream with the typed error.
        #expect(try admin.call(Self.removeCall).errorName == nil)
        try await pollUntil("the end of the stream") { seen.ended != nil }
        #expect((seen.ended as? TokendClientError)?.code == .unknownUser)
        _ = await consumer.value
        try await restarted.stop()
    }

    @Test func cancellingTheConsumerClosesTheWatchConnection() async throws {
        let directory = try ScratchDirectory()
        let daemon = try DaemonProcess(configuration: DaemonProcess.configuration() + ScrapedMetrics.configuration, directory: directory)
        try await daemon.start()
        let admin = try RawClient(path: daemon.socketPath)
        #expect(try admin.call(Tokens.addCall(user: "w", access: Tokens.random("w-"), refresh: nil)).errorName == nil)
        let baseline = try #require(try ScrapedMetrics.scrape(directory)[ScrapedMetrics.connections])
        let client = TokendClient(socketPath: daemon.socketPath)
        let seen = UpdateLog()
        let consumer = Task {
            for try await credentials in client.updates(for: "w") { seen.append(credentials) }
        }
        try await pollUntil("the first token") { seen.tokens.count == 1 }
        #expect(try ScrapedMetrics.scrape(directory)[ScrapedMetrics.connections] == baseline + 1)
        consumer.cancel()
        try await pollUntil("the watch connection closed") {
            try ScrapedMetrics.scrape(directory)[ScrapedMetrics.connections] == baseline
        }

        // Breaking out of the loop closes it too.
        for try await _ in client.updates(for: "w") { break }
        try await pollUntil("the second watch connection closed") {
            try ScrapedMetrics.scrape(directory)[ScrapedMetrics.connections] == baseline
        }

        // Before any reply, an unreachable daemon ends the stream at once.
        let nowhere = TokendClient(socketPath: directory.file("nothing.sock"))
        await #expect(throws: TokendClientError(code: .daemonUnavailable)) {
            for try await _ in nowhere.updates(for: "w") {}
        }
        try await daemon.stop()
    }

    // MARK: tokenctl

    @Test func tokenctlExecPutsTheTokenOnlyInTheChosenVariable() async throws {
        let daemon = try DaemonProcess()
        try await daemon.start()
        let admin = try RawClient(path: daemon.socketPath)
        let token = Tokens.random("exec-")
        #expect(try admin.call(Tokens.addCall(user: "alice", access: token, refresh: nil)).errorName == nil)
        let dump = "import json, os, sys; print(json.dumps({'argv': sys.argv, 'env': dict(os.environ), 'pid': os.getpid()}))"
        let child = try StreamingCommand(
            Repository.binary("tokenctl"),
            [
                "exec", "--socket", daemon.socketPath, "alice", "--env", "MY_TOKEN", "--min-valid", "60", "--", "python3", "-c", dump,
                "one", "two",
            ]
        )
        let finished = try await child.finish()
        #expect(finished.status == 0, "\(finished.stderr)")
        let report = try RawClient.object(finished.stdout)
        let environment = report["env"] as? [String: String] ?? [:]
        #expect(environment["MY_TOKEN"] == token)
        #expect(environment["ACCESS_TOKEN"] == nil)
        #expect(environment.filter { $0.value.contains(token) }.keys.sorted() == ["MY_TOKEN"])
        let argv = report["argv"] as? [String] ?? []
        #expect(argv == ["-c", "one", "two"])
        #expect(!argv.contains { $0.contains(token) })
        #expect(report["pid"] as? Int == Int(child.processIdentifier), "the command replaced tokenctl (execve)")
        #expect(!finished.stderr.contains(token))

        // The default variable, and the command's exit status passes through.
        let status = try await runCommand(
            Repository.binary("tokenctl"),
            [
                "exec", "--socket", daemon.socketPath, "alice", "--", "/bin/sh", "-c", #"test "$ACCESS_TOKEN" = "$1" && exit 42"#, "sh",
                token,
            ]
        )
        #expect(status.status == 42)
        // No token, no command: the error's status, and the command never ran.
        let marker = daemon.directory.file("ran")
        let unknown = try await runCommand(
            Repository.binary("tokenctl"),
            ["exec", "--socket", daemon.socketPath, "nobody-here", "--", "/usr/bin/touch", marker]
        )
        #expect(unknown.status == 4)
        #expect(!FileManager.default.fileExists(atPath: marker))
        let missing = try await runCommand(
            Repository.binary("tokenctl"), ["exec", "--socket", daemon.socketPath, "alice", "--", "no-such-command-here"])
        #expect(missing.status == 127)
        #expect(!missing.stderr.contains(token))
        try await daemon.stop()
    }

    @Test func tokenctlWatchPrintsEachNewExpiry() async throws {
        let daemon = try DaemonProcess()
        try await daemon.start()
        let admin = try RawClient(path: daemon.socketPath)
        let first = Tokens.random("watch1-")
        let second = Tokens.random("watch2-")
        #expect(try admin.call(Tokens.addCall(user: "w", access: first, refresh: nil, expiresIn: 3600)).errorName == nil)
        let watch = try StreamingCommand(Repository.binary("tokenctl"), ["watch", "--socket", daemon.socketPath, "w"])
        let shown = try StreamingCommand(Repository.binary("tokenctl"), ["watch", "--socket", daemon.socketPath, "w", "--show-token"])
        _ = try await watch.waitForLines(1)
        _ = try await shown.waitForLines(1)
        #expect(try admin.call(Self.replaceCall(user: "w", access: second, expiresIn: 600)).errorName == nil)
        let lines = try await watch.waitForLines(2)
        let stamp = #"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"#
        #expect(
            lines[0].range(of: "^\(stamp) w expires in (59m \\d+s|1h) \\(at \(stamp)\\)$", options: .regularExpression) != nil,
            "\(lines[0])")
        #expect(
            lines[1].range(of: "^\(stamp) w expires in (9m \\d+s|10m) \\(at \(stamp)\\)$", options: .regularExpression) != nil,
            "\(lines[1])")
        #expect(!watch.stdout.contains(first) && !watch.stdout.contains(second))
        let shownLines = try await shown.waitForLines(2)
        #expect(shownLines[0].hasSuffix(" token \(first)") && shownLines[1].hasSuffix(" token \(second)"))

        // Removal ends it with the unknown-user status.
        #expect(try admin.call(Self.removeCall).errorName == nil)
        let ended = try await watch.finish()
        #expect(ended.status == 4)
        #expect(ended.stderr.contains("no credential for user 'w'"))
        _ = try await shown.finish()
        try await daemon.stop()
    }

    @Test func tokenctlHasCompletionScriptsAndOneSentenceAbstracts() async throws {
        for shell in ["bash", "zsh", "fish"] {
            let script = try await runCommand(Repository.binary("tokenctl"), ["--generate-completion-script", shell])
            #expect(script.status == 0)
            #expect(script.stdout.contains("watch") && script.stdout.contains("exec"), "\(shell)")
        }
        let help = try await runCommand(Repository.binary("tokenctl"), ["--help"])
        let subcommands = help.stdout.components(separatedBy: "SUBCOMMANDS:").last ?? ""
        for name in ["watch", "exec"] { #expect(subcommands.contains(name)) }
        #expect(help.stdout.contains("--generate-completion-script"))
        for name in ["status", "token", "watch", "exec", "add", "remove", "rotate-key"] {
            let page = try await runCommand(Repository.binary("tokenctl"), ["help", name])
            let overview = page.stdout.components(separatedBy: "\n\n").first ?? ""
            let abstract = overview.replacingOccurrences(of: "OVERVIEW: ", with: "").replacingOccurrences(of: "\n", with: " ")
            #expect(abstract.hasSuffix(".") && !abstract.dropLast().contains(". "), "\(name): \(abstract)")
        }
    }
}

/// What a consumer of `updates(for:)` saw.
final class UpdateLog: @unchecked Sendable {
    // @unchecked: every field is behind `lock`.
    private let lock = NSLock()
    private var credentials: [Credentials] = []
    private var endError: (any Error)?
    private var hasEnded = false

    func append(_ value: Credentials) { lock.withLock { credentials.append(value) } }
    func finish(_ error: (any Error)?) {
        lock.withLock {
            hasEnded = true
            endError = error ?? TestFailure("ended without an error")
        }
    }

    var tokens: [String] { lock.withLock { credentials.map(\.accessToken) } }
    /// The error the stream ended with, `nil` while it runs.
    var ended: (any Error)? { lock.withLock { hasEnded ? endError : nil } }
}

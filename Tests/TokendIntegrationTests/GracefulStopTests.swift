import Foundation
import Testing

/// Stopping (SIGTERM) in the middle of a refresh storm: the grants already sent finish and are
/// stored; the ones still waiting for a grant slot do not start.
@Suite(.serialized)
struct GracefulStopTests {
    static let credentials = 10

    @Test func aStopDuringAStormFinishesTheGrantsSentAndStartsNoOther() async throws {
        // Two grants at a time, each held 5 s by the proxy: the whole storm would take 25 s,
        // well inside the 60 s shutdown_timeout, so a stop that waited for every queued grant
        // would refresh all of them.
        let (setup, proxy) = try await IdPDaemon.startBehindProxy(
            providerExtra: "refresh_at = 0.1",
            daemonExtra: "max_grants_in_flight = 2\nshutdown_timeout = \"60s\"\nhttp_timeout = \"20s\""
        )
        let client = try RawClient(path: setup.daemon.socketPath)
        try await proxy.set(["mode": "slow:5"])
        // Minted first, then added back to back, so all fall due together however slow the
        // machine is: 2 s after they were added (10 % of 20 s).
        try await setup.addMintedUsers(Self.credentials, client: client)
        let addedAt = ContinuousClock.now
        // Stop once every credential is due (two grants at the proxy, the rest waiting for a slot).
        while ContinuousClock.now < addedAt + .seconds(30) {
            let posts = try await proxy.stats()["token_posts"] as? Int ?? 0
            if posts >= 1, ContinuousClock.now >= addedAt + .seconds(3) { break }
            try await Task.sleep(for: .milliseconds(100))
        }
        let before = try await proxy.stats()["token_posts"] as? Int ?? 0
        #expect(before >= 1 && before < Self.credentials, "the storm is under way: \(before) POSTs")
        let status = try await setup.daemon.stop()
        #expect(status == 0)

        let posts = try await proxy.stats()["token_posts"] as? Int ?? -1
        let database = setup.daemon.stateDirectory + "/tokend.sqlite"
        let refreshes = Int(try await CrashRecoveryTests.sqlite(database, "SELECT sum(refresh_count) FROM credentials")) ?? -1
        let marked =
            Int(
                try await CrashRecoveryTests.sqlite(
                    database, "SELECT count(*) FROM credentials WHERE state = 'refreshing' OR grant_started_at IS NOT NULL")) ?? -1
        #expect(refreshes == posts, "every grant sent was finished and stored: \(posts) POSTs, \(refreshes) refreshes")
        #expect(marked == 0, "no credential is left marked in flight")
        #expect(posts < Self.credentials, "the grants still queued at the stop did not start: \(posts) of \(Self.credentials)")
        #expect(setup.daemon.log.contains("stopping"))
        await setup.idp.stop()
        proxy.stop()
    }
}

/// `max_grants_in_flight` is the limit on grants at once, also above AsyncHTTPClient's default
/// of 8 connections per host.
@Suite(.serialized)
struct GrantCapTests {
    @Test func twelveGrantsRunAtOnceWhenTheCapIsTwelve() async throws {
        let cap = 12
        let (setup, proxy) = try await IdPDaemon.startBehindProxy(
            providerExtra: "refresh_at = 0.1",
            daemonExtra: "max_grants_in_flight = \(cap)\nhttp_timeout = \"20s\""
        )
        let client = try RawClient(path: setup.daemon.socketPath)
        try await proxy.set(["mode": "slow:4"])
        try await setup.addMintedUsers(cap + 4, client: client)
        // All fall due 2 s after they were added; each grant is held 4 s at the proxy.
        let deadline = ContinuousClock.now + .seconds(30)
        var most = 0
        while ContinuousClock.now < deadline, most < cap {
            most = try await proxy.stats()["max_inflight"] as? Int ?? 0
            try await Task.sleep(for: .milliseconds(100))
        }
        #expect(most == cap, "\(cap) grants at once, no more: \(most)")
        _ = try await setup.daemon.stop()
        #expect(try await proxy.stats()["max_inflight"] as? Int ?? 0 <= cap, "the cap held")
        await setup.idp.stop()
        proxy.stop()
    }
}

extension IdPDaemon {
    /// Mints `count` credentials of 20 s at the IdP and adds them as `user-0`… back to back, so
    /// that they all fall due together however slow the machine is.
    func addMintedUsers(_ count: Int, client: RawClient) async throws {
        let minted = try await idp.mint(count: count, lifetime: 20)
        for (index, response) in minted.enumerated() {
            let reply = try client.call(
                Tokens.addCall(
                    user: "user-\(index)", access: response["access_token"] as! String, refresh: response["refresh_token"] as? String,
                    expiresIn: 20
                ))
            #expect(reply.errorName == nil, "\(reply)")
        }
    }
}

/// A connection tokend accepted before a stop, whose first call it had not read yet (still on its
/// way, as for a `tokenctl token` that connected a moment before `systemctl restart`, or an
/// upgrade of the package): the call is answered, then the connection closes. Closing it unread
/// would leave the caller with "the connection to tokend was closed" and no way to tell whether
/// its call was seen (scripts/realhost's h-deb-upgrade saw exactly that).
@Suite(.serialized)
struct GracefulStopOfFreshConnectionsTests {
    @Test func aCallOnAConnectionAcceptedBeforeTheStopIsAnsweredThenItCloses() async throws {
        let daemon = try DaemonProcess(configuration: DaemonProcess.configuration(extraDaemon: #"shutdown_timeout = "20s""#))
        try await daemon.start()
        let used = try RawClient(path: daemon.socketPath)
        let access = Tokens.random("served-")
        #expect(try used.call(Tokens.addCall(user: "alice", access: access, refresh: "r")).errorName == nil)
        let fresh = try RawClient(path: daemon.socketPath)
        // tokend has accepted it: root's open connections (Status) count it.
        let deadline = ContinuousClock.now + .seconds(30)
        while ContinuousClock.now < deadline {
            let status = try used.call(#"{"method":"io.tokend.TokenProvider.Status"}"#)
            let caller = (status.parameters["daemon"] as? [String: Any])?["caller"] as? [String: Any]
            if (caller?["connections"] as? Int ?? 0) >= 2 { break }
            try await Task.sleep(for: .milliseconds(50))
        }

        daemon.send(signal: SIGTERM)
        // The stop has reached the connections: the one whose calls were all answered is closed.
        #expect(try used.receive() == nil, "an idle connection that was used closes at the stop")
        let reply = try fresh.call(Tokens.tokenCall(user: "alice"))
        #expect(reply.accessToken == access, "the first call of the connection accepted before the stop is answered: \(reply)")
        #expect(try fresh.receive() == nil, "then that connection closes too")
        #expect(try await daemon.stop() == 0)
    }

    /// One that never sends anything does not hold the stop until shutdown_timeout (60 s here):
    /// it is closed after a short grace, and tokend exits well within the test's 20 s.
    @Test func aConnectionThatNeverCallsDoesNotHoldTheStop() async throws {
        let daemon = try DaemonProcess(configuration: DaemonProcess.configuration(extraDaemon: #"shutdown_timeout = "60s""#))
        try await daemon.start()
        let used = try RawClient(path: daemon.socketPath)
        let silent = try RawClient(path: daemon.socketPath)
        let deadline = ContinuousClock.now + .seconds(30)
        while ContinuousClock.now < deadline {
            let status = try used.call(#"{"method":"io.tokend.TokenProvider.Status"}"#)
            let caller = (status.parameters["daemon"] as? [String: Any])?["caller"] as? [String: Any]
            if (caller?["connections"] as? Int ?? 0) >= 2 { break }
            try await Task.sleep(for: .milliseconds(50))
        }
        #expect(try await daemon.stop(timeout: .seconds(20)) == 0)
        #expect(try silent.receive() == nil)
    }
}

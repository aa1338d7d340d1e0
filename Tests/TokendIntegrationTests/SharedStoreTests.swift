import Foundation
import Testing
import TokendTestSupport

/// Several tokend processes sharing one PostgreSQL store, against the real test IdP with reuse
/// protection on: a refresh token spent twice revokes the whole family, so any race between the
/// nodes shows up as `ReauthenticationRequired`.
@Suite(.serialized, .enabled(if: PostgresServer.isAvailable, "needs PostgreSQL 15 (scripts/setup-host.sh) and root"))
struct SharedStoreTests {
    /// A database, an IdP and `count` tokend nodes with their own sockets and state directories,
    /// one master key file.
    final class Fleet: @unchecked Sendable {
        // @unchecked: owned by one test.
        let directory: ScratchDirectory
        let database: PostgresServer
        let idp: IdentityProvider
        var nodes: [DaemonProcess] = []
        var proxy: FaultProxy?

        init(
            count: Int, lifetime: Int, refreshGrace: Int = 0, lease: String = "6s", daemonExtra: String = "", slowFirstNode: Bool = false,
            slowEveryNode: Bool = false,
            providerExtra: String = "refresh_at = 0.5\nrefresh_margin = \"1s\"", reconcile: String = "1s", storeExtra: String = "",
            metrics: String = "", prepareDatabase: (PostgresServer) async throws -> String = { _ in "" }
        ) async throws {
            try requireVenv()
            directory = try ScratchDirectory()
            database = try await PostgresServer()
            // More [store] keys, from the database's set-up (e.g. a CA file).
            let storeExtra = storeExtra + "\n" + (try await prepareDatabase(database))
            idp = try IdentityProvider(
                directory: directory, options: .init(accessTokenLifetime: lifetime, refreshGrace: refreshGrace, reuseProtection: true))
            try await idp.start()
            if slowFirstNode || slowEveryNode {
                let proxy = try FaultProxy(upstreamPort: idp.port)
                try await proxy.start()
                self.proxy = proxy
            }
            for index in 0..<count {
                let node = try ScratchDirectory()
                try node.write("idp-secret", IdentityProvider.clientSecret + "\n", mode: 0o600)
                try node.write("pg-password", PostgresServer.password + "\n", mode: 0o600)
                let endpoint = index == 0 || slowEveryNode ? proxy?.tokenEndpoint : nil
                let providers =
                    idp.providerConfiguration(name: "example", extra: providerExtra, endpoint: endpoint) + """

                        [store]
                        kind = "postgresql"
                        url = "\(database.url)"
                        password_file = "pg-password"
                        lease = "\(lease)"
                        reconcile_interval = "\(reconcile)"
                        \(storeExtra)
                        """
                let config = DaemonProcess.configuration(
                    extraDaemon: """
                        node_name = "node-\(index)"
                        key_file = "\(directory.file("tokend.key"))"
                        forced_refresh_interval = "1s"
                        http_timeout = "4s"
                        retry_initial = "500ms"
                        retry_max = "2s"
                        call_timeout = "20s"
                        \(daemonExtra)
                        """,
                    providers: providers
                )
                let daemon = try DaemonProcess(configuration: config + "\n" + metrics + "\n", directory: node)
                // The first node creates the key file; the others load the same key.
                try await daemon.start()
                nodes.append(daemon)
            }
        }

        func client(_ index: Int) throws -> RawClient { try RawClient(path: nodes[index].socketPath) }

        /// Adds a freshly minted credential through node 0.
        @discardableResult
        func add(_ user: String, lifetime: Int) async throws -> [String: Any] {
            let minted = try await idp.mint(count: 1, lifetime: lifetime)[0]
            let reply = try client(0).call(
                Tokens.addCall(
                    user: user, access: minted["access_token"] as! String, refresh: minted["refresh_token"] as? String,
                    expiresIn: minted["expires_in"] as? Int ?? lifetime))
            guard reply.errorName == nil else { throw TestFailure("AddCredential failed: \(reply)") }
            return minted
        }

        func status(_ index: Int, _ user: String? = nil) throws -> (daemon: [String: Any], credentials: [[String: Any]]) {
            let call =
                user.map { #"{"method":"io.tokend.TokenProvider.Status","parameters":{"userIdentifier":"\#($0)"}}"# }
                ?? #"{"method":"io.tokend.TokenProvider.Status","parameters":{}}"#
            let reply = try client(index).call(call)
            return (reply.parameters["daemon"] as? [String: Any] ?? [:], reply.parameters["credentials"] as? [[String: Any]] ?? [])
        }

        /// Waits (bounded) until `condition` holds.
        func eventually(_ timeout: Duration, _ condition: () throws -> Bool) async throws -> Bool {
            let deadline = ContinuousClock.now + timeout
            while ContinuousClock.now < deadline {
                if (try? condition()) == true { return true }
                try await Task.sleep(for: .milliseconds(200))
            }
            return try condition()
        }

        var logs: String { nodes.enumerated().map { "--- node-\($0.offset)\n\($0.element.log.suffix(4000))" }.joined(separator: "\n") }

        func stop() async {
            for node in nodes { _ = try? await node.stop() }
            proxy?.stop()
            await idp.stop()
            await database.shutdown()
        }
    }

    /// A DPoP-bound credential enrolled through one node is proven with the same key by every
    /// node: the key travels sealed through the shared store and is opened where it is needed.
    @Test func aDPoPKeyEnrolledOnOneNodeSignsOnEveryNode() async throws {
        let fleet = try await Fleet(count: 2, lifetime: 3600, providerExtra: "dpop = true\ndpop_bind_on_refresh = true")
        let token = Tokens.random("fleet-dpop-")
        let added = try fleet.client(0).call(
            DPoPProofCallTests.call(
                "AddCredential",
                [
                    "userIdentifier": "alice", "provider": "example", "accessToken": token, "refreshToken": Tokens.random("rt-"),
                    "tokenType": "DPoP", "expiresIn": 3600,
                ]))
        #expect(added.errorName == nil, "\(added)")
        var thumbprints: [String] = []
        for node in 0..<2 {
            var reply: [String: Any] = [:]
            _ = try await fleet.eventually(.seconds(10)) {
                reply = try fleet.client(node).call(DPoPProofCallTests.proofCall())
                return reply.errorName == nil
            }
            let proof = try #require(reply.parameters["proof"] as? String, "node \(node): \(reply) \(fleet.logs)")
            thumbprints.append(try #require(try await DPoPProofCallTests.inspect(proof, token: token)["jkt"] as? String))
        }
        #expect(thumbprints.count == 2 && thumbprints[0] == thumbprints[1], "\(thumbprints)")
        await fleet.stop()
    }

    /// A narrowed token got on one node is kept in the shared store, sealed with the credential:
    /// the other node serves it without asking the provider, and the rotated refresh token the
    /// grant left is the one the other node's own refresh uses.
    @Test func aNarrowedTokenGotOnOneNodeIsServedByEveryNode() async throws {
        let fleet = try await Fleet(count: 2, lifetime: 3600, providerExtra: "narrowed_tokens = true")
        let minted = try await fleet.idp.mint(count: 1, scope: "read write")[0]
        let added = try fleet.client(0).call(
            Tokens.addCall(
                user: "alice", access: minted["access_token"] as! String, refresh: minted["refresh_token"] as? String, scope: "read write"))
        #expect(added.errorName == nil, "\(added)")
        let narrowed = try fleet.client(0).call(Tokens.tokenCall(user: "alice", scope: "read"))
        let token = try #require(narrowed.accessToken, "\(narrowed) \(fleet.logs)")
        let before = try await fleet.idp.postCount()
        var other: [String: Any] = [:]
        _ = try await fleet.eventually(.seconds(10)) {
            other = try fleet.client(1).call(Tokens.tokenCall(user: "alice", scope: "read"))
            return other.errorName != "io.tokend.TokenProvider.UnknownUser"
        }
        #expect(other.accessToken == token, "\(other)")
        #expect(try await fleet.idp.postCount() == before, "the second node asked nothing of the provider")
        try await Task.sleep(for: .milliseconds(1100))
        let own = try fleet.client(1).call(Tokens.tokenCall(user: "alice", rejected: minted["access_token"] as? String))
        #expect(own.accessToken != nil && own.accessToken != minted["access_token"] as? String, "\(own) \(fleet.logs)")
        await fleet.stop()
    }

    @Test func eachCredentialIsRefreshedOncePerCycleAcrossTheFleetAndWatchersEverywhereSeeIt() async throws {
        let fleet = try await Fleet(count: 3, lifetime: 8)
        let users = ["alice", "bob", "carol"]
        let addedAt = ContinuousClock.now
        for user in users { try await fleet.add(user, lifetime: 8) }
        let before = try await fleet.idp.postCount()
        // Node 0 wrote them; node 2 serves them from memory.
        #expect(
            try await fleet.eventually(.seconds(5)) {
                try users.allSatisfy { try fleet.client(2).call(Tokens.tokenCall(user: $0)).accessToken != nil }
            })
        // A watcher on node 2 sees the refreshes that any node makes.
        let watched = Task {
            await onOwnThread { () -> [String] in
                guard let watcher = try? fleet.client(2),
                    (try? watcher.send(#"{"method":"io.tokend.TokenProvider.Watch","parameters":{"userIdentifier":"alice"},"more":true}"#))
                        != nil
                else { return [] }
                // The first reply is the current token; then one per refresh.
                var tokens: [String] = []
                for _ in 0..<4 {
                    guard let text = try? watcher.receive(), let token = (try? RawClient.object(text))?.accessToken else { break }
                    tokens.append(token)
                }
                return tokens
            }
        }
        // About three refresh cycles (refresh at half of an 8 s lifetime).
        try await Task.sleep(for: .seconds(13))
        let seen = await watched.value
        let first = seen.first
        let updates = seen.dropFirst()
        #expect(first != nil, "the watcher's first reply: \(fleet.logs)")
        #expect(!updates.isEmpty, "the watcher on node 2 saw a refresh: \(fleet.logs)")
        #expect(updates.first != first)
        // Every node serves the same, current token for each credential, and none needs a new login.
        for user in users {
            let tokens = try (0..<3).map { try fleet.client($0).call(Tokens.tokenCall(user: user)) }
            #expect(tokens.allSatisfy { $0.errorName == nil }, "\(user): \(tokens)")
            #expect(Set(tokens.compactMap(\.accessToken)).count == 1, "\(user) is coherent across nodes: \(tokens)")
        }
        let status = try fleet.status(1)
        #expect(Set(status.daemon["nodes"] as? [String] ?? []) == ["node-0", "node-1", "node-2"], "\(status.daemon)")
        #expect(status.daemon["node"] as? String == "node-1")
        #expect(status.daemon["store"] as? String == "postgresql")
        #expect(status.daemon["storeProblem"] == nil)
        // Stop the fleet (grants in flight commit first), then compare the grants the IdP saw with
        // the refreshes stored: one POST per refresh, so no credential was refreshed twice per cycle.
        for node in fleet.nodes { try await node.stop() }
        let posts = try await fleet.idp.postCount() - before
        let refreshes = Int(try await fleet.database.psql("SELECT sum(refresh_count) FROM tokend_credentials")) ?? -1
        let perUser = try await fleet.database.psql(
            "SELECT string_agg(refresh_count::text, ',' ORDER BY user_identifier) FROM tokend_credentials")
        let states = try await fleet.database.psql("SELECT string_agg(DISTINCT state, ',') FROM tokend_credentials")
        // A grant cut short by its node's stop (on a loaded machine a stop can outlast
        // shutdown_timeout) stays marked `refreshing`, with or without its POST sent, and no
        // refresh stored; the next start recovers it from that durable marker. Those are the
        // only POSTs without a stored refresh. A double spend would show as
        // reauthentication_required, which reuse protection makes of the whole family.
        let unfinished = Int(try await fleet.database.psql("SELECT count(*) FROM tokend_credentials WHERE state = 'refreshing'")) ?? -1
        #expect(
            posts <= refreshes + unfinished,
            "no grant without its stored refresh across the fleet: \(posts) POSTs, \(refreshes) refreshes, \(unfinished) unfinished (\(perUser))"
        )
        // Once per cycle: a cycle is at least (refresh_at − jitter) × lifetime = 0.45 × 8 s, so in
        // the time the fleet ran each credential can have been refreshed at most this often
        // (a fleet refreshing on every node would reach about three times as many).
        let ran = (ContinuousClock.now - addedAt) / .milliseconds(3600)
        let most = Int(ran.rounded(.down)) + 1
        // At the server: no more grants than one per credential per cycle.
        #expect(posts <= users.count * most, "\(posts) POSTs for \(users.count) credentials in \(ran * 3.6) s")
        #expect(
            perUser.split(separator: ",").allSatisfy { (Int($0) ?? 0) >= 2 && (Int($0) ?? 99) <= most },
            "2–\(most) cycles each in \(ran * 3.6) s: \(perUser)")
        #expect(
            states == "valid" || states == "refreshing,valid" || states == "refreshing", "no credential lost to a double spend: \(states)")
        // The refreshes were spread over the nodes, not all made by one.
        let refreshers = fleet.nodes.filter { $0.log.contains("credential refreshed") }.count
        #expect(refreshers >= 2, "refreshes spread over the nodes: \(refreshers)")
        await fleet.stop()
    }

    @Test func whenTheLeaseHolderIsKilledAnotherNodeTakesOverWithNoCredentialLost() async throws {
        // Node 0 reaches the IdP through a slow proxy, so it holds the lease for seconds.
        let fleet = try await Fleet(count: 3, lifetime: 300, refreshGrace: 30, lease: "5s", slowFirstNode: true)
        let minted = try await fleet.add("alice", lifetime: 300)
        let old = minted["access_token"] as! String
        try await fleet.proxy?.set(["mode": "slow:3"])
        // Node 0 starts an on-demand refresh (the caller's connection is then dropped).
        let caller = try fleet.client(0)
        try caller.send(Tokens.tokenCall(user: "alice", minValid: 600))
        #expect(
            try await fleet.eventually(.seconds(5)) {
                try fleet.status(1, "alice").credentials.first?["leaseHolder"] as? String == "node-0"
            }, "node 1 sees node 0 holding the lease: \(fleet.logs)")
        try await fleet.nodes[0].stop(signal: SIGKILL)
        // Node 1 needs a fresh token too: it waits for the lease to lapse, then refreshes itself.
        let reply = try fleet.client(1).call(Tokens.tokenCall(user: "alice", minValid: 600))
        #expect(reply.errorName == nil, "\(reply) \(fleet.logs)")
        let fresh = try #require(reply.accessToken)
        #expect(fresh != old)
        // Node 2 serves the same token; the credential is alive at the IdP.
        #expect(try await fleet.eventually(.seconds(5)) { try fleet.client(2).call(Tokens.tokenCall(user: "alice")).accessToken == fresh })
        let status = try fleet.status(2, "alice").credentials.first ?? [:]
        #expect(status["state"] as? String == "valid", "\(status)")
        // Node 1 releases the lease after storing the token; node 2 hears of it a moment later.
        #expect(
            try await fleet.eventually(.seconds(5)) { try fleet.status(2, "alice").credentials.first?["leaseHolder"] == nil },
            "the lease was released: \(status)")
        // And refreshing again works: the rotated refresh token was stored.
        try await Task.sleep(for: .milliseconds(1100))
        let again = try fleet.client(2).call(Tokens.tokenCall(user: "alice", rejected: fresh))
        #expect(again.accessToken != nil && again.accessToken != fresh, "\(again)")
        await fleet.stop()
    }

    @Test func tokensAreServedWhileTheDatabaseIsDownAndRefreshesResumeAfter() async throws {
        // Refresh point at 15 s (half the lifetime), with room on a loaded machine for the
        // database to stop and both nodes to notice before it.
        let fleet = try await Fleet(count: 2, lifetime: 30)
        let addedAt = ContinuousClock.now
        let minted = try await fleet.add("alice", lifetime: 30)
        let old = minted["access_token"] as! String
        #expect(try await fleet.eventually(.seconds(5)) { try fleet.client(1).call(Tokens.tokenCall(user: "alice")).accessToken == old })
        try await fleet.database.stop()
        // Both nodes notice and say so, and keep serving the still-valid token.
        #expect(
            try await fleet.eventually(.seconds(10)) {
                try (0..<2).allSatisfy { (try fleet.status($0).daemon["storeProblem"] as? String) != nil }
            }, "status reports the store unavailable: \(fleet.logs)")
        for index in 0..<2 {
            #expect(try fleet.client(index).call(Tokens.tokenCall(user: "alice")).accessToken == old)
        }
        // Past the refresh point (half the lifetime): nothing can be refreshed, the token is still served.
        try await Task.sleep(until: addedAt + .seconds(17), clock: .continuous)
        #expect(try fleet.client(0).call(Tokens.tokenCall(user: "alice")).accessToken == old)
        try await fleet.database.start()
        // Refreshes resume: a new token, valid, on both nodes; the store is healthy again.
        #expect(
            try await fleet.eventually(.seconds(20)) {
                let tokens = try (0..<2).map { try fleet.client($0).call(Tokens.tokenCall(user: "alice")).accessToken }
                return tokens[0] != nil && tokens[0] != old && tokens[0] == tokens[1]
            }, "refreshed after the database came back: \(fleet.logs)")
        #expect(try await fleet.eventually(.seconds(10)) { try fleet.status(1).daemon["storeProblem"] == nil })
        #expect(try fleet.status(0, "alice").credentials.first?["state"] as? String == "valid")
        await fleet.stop()
    }
}

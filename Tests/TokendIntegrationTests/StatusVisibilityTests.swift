import Foundation
import Testing
import TokendTestSupport

/// What `Status` tells a caller who is not an administrator: their own credentials and what
/// concerns them, not the fleet's node names, the database's address or its error text, or how
/// many credentials others hold.
@Suite(.serialized)
struct StatusVisibilityTests {
    static let statusCall = #"{"method":"io.tokend.TokenProvider.Status","parameters":{}}"#

    /// `Status` as uid/gid 65534: the daemon part and the credentials.
    static func statusAsNobody(_ socket: String) async throws -> (daemon: [String: Any], credentials: [[String: Any]]) {
        let reply = try await OtherUser.call(statusCall, socket: socket, uid: 65534, gid: 65534)
        let parameters = reply["parameters"] as? [String: Any] ?? [:]
        return (parameters["daemon"] as? [String: Any] ?? [:], parameters["credentials"] as? [[String: Any]] ?? [])
    }

    @Test(.enabled(if: PostgresServer.isAvailable, "needs PostgreSQL 15 and root"))
    func aUserOfASharedStoreSeesNeitherNodesNorTheDatabasesProblem() async throws {
        let fleet = try await SharedStoreTests.Fleet(count: 2, lifetime: 3600)
        defer { _ = Task { await fleet.stop() } }
        for (user, readers) in [("alice", ["uid:0"]), ("bob", ["uid:7001"]), ("nobodys", ["uid:65534"])] {
            let reply = try fleet.client(0).call(Tokens.addCall(user: user, access: Tokens.random("a-"), refresh: "r", readers: readers))
            #expect(reply.errorName == nil, "\(reply)")
        }
        let socket = fleet.nodes[1].socketPath
        #expect(try await fleet.eventually(.seconds(10)) { try fleet.status(1).credentials.count == 3 }, "\(fleet.logs)")

        // The administrator sees the fleet.
        let admin = try fleet.status(1)
        #expect(admin.daemon["node"] as? String == "node-1")
        #expect((admin.daemon["nodes"] as? [String])?.sorted() == ["node-0", "node-1"], "\(admin.daemon)")
        #expect(admin.daemon["credentials"] as? Int == 3)

        // uid 65534 sees its own credential and counts, and no node.
        let nobody = try await Self.statusAsNobody(socket)
        #expect(nobody.credentials.map { $0["userIdentifier"] as? String } == ["nobodys"], "\(nobody.credentials)")
        #expect(nobody.daemon["node"] == nil && nobody.daemon["nodes"] == nil, "\(nobody.daemon)")
        #expect(nobody.daemon["credentials"] as? Int == 1, "\(nobody.daemon)")
        #expect(nobody.daemon["valid"] as? Int == 1, "\(nobody.daemon)")
        #expect(nobody.daemon["store"] as? String == "postgresql")
        #expect(nobody.credentials.allSatisfy { $0["leaseHolder"] == nil }, "\(nobody.credentials)")

        // The database goes away: the administrator reads why; uid 65534 only that it is so.
        try await fleet.database.stop()
        #expect(
            try await fleet.eventually(.seconds(15)) { (try fleet.status(1).daemon["storeProblem"] as? String) != nil },
            "\(fleet.logs)")
        let problem = try #require(try fleet.status(1).daemon["storeProblem"] as? String)
        let seen = try await Self.statusAsNobody(socket)
        let told = try #require(seen.daemon["storeProblem"] as? String, "\(seen.daemon)")
        #expect(told != problem, "the database's own error text: \(told)")
        for detail in ["127.0.0.1", "\(fleet.database.port)", "postgres", "node-"] {
            #expect(!told.contains(detail), "\(detail) in \(told)")
        }
        #expect(seen.daemon["node"] == nil && seen.daemon["nodes"] == nil)
        await fleet.stop()
    }

    /// On one host, the counts a user sees are their own credentials'.
    @Test func aUsersCountsAreTheirOwn() async throws {
        let daemon = try DaemonProcess()
        try await daemon.start()
        defer { _ = Task { try? await daemon.stop() } }
        let client = try RawClient(path: daemon.socketPath)
        for (user, readers) in [("alice", ["uid:0"]), ("bob", ["uid:7001"]), ("nobodys", ["uid:65534"])] {
            #expect(
                try client.call(Tokens.addCall(user: user, access: Tokens.random("a-"), refresh: "r", readers: readers)).errorName == nil)
        }
        let nobody = try await Self.statusAsNobody(daemon.socketPath)
        #expect(nobody.daemon["credentials"] as? Int == 1, "\(nobody.daemon)")
        #expect(nobody.daemon["valid"] as? Int == 1, "\(nobody.daemon)")
        #expect(nobody.credentials.count == 1)
        let admin = try client.call(Self.statusCall)
        #expect((admin.parameters["daemon"] as? [String: Any])?["credentials"] as? Int == 3)
    }
}

import Testing
import TokendCore
import TokendPostgres

/// The pure parts: store URLs and change notifications.
@Suite struct PostgresParsingTests {
    @Test func parsesURLs() throws {
        let url = try PostgresURL.parse("postgresql://tokend@db.example:6543/creds")
        #expect(url == PostgresURL(user: "tokend", host: "db.example", port: 6543, database: "creds"))
        #expect(try PostgresURL.parse("postgres://a@127.0.0.1/b").port == 5432)
        #expect(try PostgresURL.parse("postgresql://a@[::1]:7000/b").host == "::1")
        #expect(try PostgresURL.parse("postgresql://a%40b@h/d").user == "a@b")
    }

    @Test(arguments: [
        "mysql://a@h/d", "postgresql://h/d", "postgresql://a:secret@h/d", "postgresql://a@h", "postgresql://a@h:0/d",
        "postgresql://a@h:99999/d", "postgresql://a@h/d?sslmode=require", "postgresql://a@/d", "postgresql://a%zz@h/d",
    ])
    func refusesBadURLs(_ text: String) {
        #expect(throws: PostgresURL.Problem.self) { try PostgresURL.parse(text) }
    }

    /// The hosts for which an unverified (`prefer`) connection draws no warning at start.
    @Test(arguments: [
        ("postgresql://tokend@localhost/tokend", true), ("postgresql://tokend@127.0.0.1:5432/tokend", true),
        ("postgresql://tokend@[::1]:5432/tokend", true), ("postgresql://tokend@db.example.org/tokend", false),
        ("postgresql://tokend@10.0.0.5/tokend", false), ("postgresql://tokend@localhost.example.org/tokend", false),
    ])
    func loopbackHosts(url: String, isLoopback: Bool) throws {
        #expect(try PostgresURL.parse(url).isLoopback == isLoopback)
    }

    @Test func aPasswordNeverAppearsInTheProblem() {
        do {
            _ = try PostgresURL.parse("postgresql://a:hunter2@h/d")
            Issue.record("accepted a URL with a password")
        } catch {
            #expect(!error.description.contains("hunter2"))
        }
    }

    @Test func parsesNotifications() {
        #expect(ChangeNotification.parse("C U 42 alice") == .credentialUpdated(userIdentifier: "alice", generation: 42))
        #expect(ChangeNotification.parse("C D 7 svc-backup") == .credentialRemoved(userIdentifier: "svc-backup", generation: 7))
        #expect(
            ChangeNotification.parse("L 9 1700000000000 node-a alice")
                == .lease(
                    userIdentifier: "alice", holder: "node-a", fencing: 9, expiresAt: Timestamp(millisecondsSince1970: 1_700_000_000_000))
        )
        #expect(
            ChangeNotification.parse("L 10 5 - alice")
                == .lease(userIdentifier: "alice", holder: nil, fencing: 10, expiresAt: Timestamp(millisecondsSince1970: 5)))
    }

    @Test(arguments: ["", "C", "C U x alice", "C X 1 alice", "C U 1 ", "L 1 2 node", "L a 2 n u", "Z 1 2 3 4", "C U 1"])
    func ignoresMalformedNotifications(_ payload: String) {
        #expect(ChangeNotification.parse(payload) == nil)
    }
}

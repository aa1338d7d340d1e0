import Testing
import TokendClient
import TokendJSON
import TokendProtocol

@testable import TokenctlSupport

/// The `RELOGIN BY` column and the `reloginBy`/`reloginReason` fields of `tokenctl status`.
struct StatusReloginTests {
    static let now: Int64 = 1_700_000_000

    static func row(reloginBy: Int64?) -> CredentialStatus {
        var status = CredentialStatus(
            userIdentifier: "alice", provider: "p", state: "valid", expiresAt: now + 60, issuedAt: now, sessionStartedAt: now)
        status.reloginBy = reloginBy
        status.reloginReason = reloginBy == nil ? nil : "session_end"
        return status
    }

    @Test(arguments: [
        (Optional<Int64>.none, "-"), (now + 40, "40s"), (now + 2 * 86_400 + 3600, "2d 1h"), (now, "passed"), (now - 5, "passed"),
        (Int64.min, "passed"),
    ])
    func theColumnSaysHowLongUntilANewLogin(reloginBy: Int64?, shown: String) {
        #expect(StatusTable.reloginCell(Self.row(reloginBy: reloginBy), now: Self.now) == shown)
        let text = StatusTable.render(daemon: nil, credentials: [Self.row(reloginBy: reloginBy)], now: Self.now)
        #expect(text.split(separator: "\n").first?.contains("NEXT REFRESH  RELOGIN BY  LAST REFRESH") == true)
    }

    @Test func jsonCarriesTheDateAndItsReason() throws {
        let text = StatusTable.json(daemon: nil, credentials: [Self.row(reloginBy: Self.now + 40)])
        let object = try #require(try JSONParser.parse(text).objectValue)
        guard case .array(let rows)? = object["credentials"], let first = rows.first?.objectValue else {
            Issue.record("no credentials in \(text)")
            return
        }
        #expect(first["reloginBy"] == .int(Self.now + 40))
        #expect(first["reloginReason"] == .string("session_end"))
        #expect(try CredentialStatus(json: first).reloginBy == Self.now + 40)
        let none = StatusTable.json(daemon: nil, credentials: [Self.row(reloginBy: nil)])
        #expect(!none.contains("reloginBy"))
    }
}

import Testing
import TokenctlSupport
import TokendClient
import TokendProtocol

/// `tokenctl status` tells when a login with an absolute end (a HAT PDA's 30 days) must be renewed by hand.
struct StatusSessionNoteTests {
    static let now: Int64 = 1_700_000_000

    private func row(_ user: String = "alice", state: String = "valid", endsIn: Int64?) -> CredentialStatus {
        CredentialStatus(
            userIdentifier: user, provider: "pda", state: state, expiresAt: Self.now + 3600, issuedAt: 0, sessionStartedAt: 0,
            sessionEndsAt: endsIn.map { Self.now + $0 }
        )
    }

    static let notes: [(remaining: Int64, expected: String)] = [
        (2 * 86400 + 3 * 3600, "alice: the login ends in 2d 3h; reauthenticate within 2 days"),
        (29 * 86400 + 60, "alice: the login ends in 29d; reauthenticate within 29 days"),
        (86400 + 5, "alice: the login ends in 1d; reauthenticate within 1 day"),
        (5 * 3600 + 120, "alice: the login ends in 5h 2m; reauthenticate within 5h 2m"),
    ]

    @Test(arguments: notes)
    func noteRoundsDown(remaining: Int64, expected: String) {
        #expect(StatusTable.sessionNote(row(endsIn: remaining), now: Self.now) == expected)
    }

    @Test func noNoteWithoutAnEndOrAfterIt() {
        #expect(StatusTable.sessionNote(row(endsIn: nil), now: Self.now) == nil)
        #expect(StatusTable.sessionNote(row(endsIn: 0), now: Self.now) == nil)
        #expect(StatusTable.sessionNote(row(endsIn: -10), now: Self.now) == nil)
        #expect(StatusTable.sessionNote(row(state: "reauthentication_required", endsIn: 100), now: Self.now) == nil)
        var extreme = row(endsIn: nil)
        extreme.sessionEndsAt = Int64.max
        #expect(StatusTable.sessionNote(extreme, now: Int64.min) == nil)
    }

    @Test func notesFollowTheTable() {
        let text = StatusTable.render(
            daemon: nil, credentials: [row("bob", endsIn: nil), row("alice", endsIn: 2 * 86400 + 10)], now: Self.now)
        #expect(text.hasSuffix("\n\nalice: the login ends in 2d; reauthenticate within 2 days\n"), "\(text)")
        #expect(!text.contains("bob:"))
    }

    @Test func hostileUserIdentifiersAreCleaned() {
        let text = StatusTable.sessionNote(row("\u{1B}[2Jalice", endsIn: 100), now: Self.now) ?? ""
        #expect(!text.contains("\u{1B}"))
    }
}

/// `tokenctl status` tells which credentials have tokens shorter-lived than their margin.
struct StatusLifetimeNoteTests {
    private func row(_ user: String, lifetime: Int64, short: Bool?) -> CredentialStatus {
        var status = CredentialStatus(
            userIdentifier: user, provider: "idp", state: "valid", expiresAt: 1_700_000_000 + lifetime, issuedAt: 1_700_000_000,
            sessionStartedAt: 1_700_000_000)
        status.shorterThanMargin = short
        return status
    }

    @Test func aShortLivedCredentialGetsANoteWithItsLifetime() {
        #expect(
            StatusTable.lifetimeNote(row("alice", lifetime: 3, short: true))
                == "alice: its tokens live 3s, no longer than the provider's refresh_margin; each is refreshed at about two thirds of its lifetime"
        )
        #expect(StatusTable.lifetimeNote(row("bob", lifetime: 3600, short: nil)) == nil)
        #expect(StatusTable.lifetimeNote(row("carol", lifetime: 3600, short: false)) == nil)
        let text = StatusTable.render(
            daemon: nil, credentials: [row("bob", lifetime: 3600, short: nil), row("alice", lifetime: 5, short: true)], now: 1_700_000_001)
        #expect(
            text.hasSuffix(
                "\n\nalice: its tokens live 5s, no longer than the provider's refresh_margin; each is refreshed at about two thirds of its lifetime\n"
            ), "\(text)")
    }

    @Test func theFieldRoundTripsAndIsAbsentWhenFalse() throws {
        let short = row("alice", lifetime: 3, short: true)
        #expect(try CredentialStatus(json: short.json).shorterThanMargin == true)
        #expect(row("bob", lifetime: 3, short: nil).json["shorterThanMargin"] == nil)
    }
}

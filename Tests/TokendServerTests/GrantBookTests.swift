import Testing
import TokendConfig
import TokendCore

@testable import TokendServer

/// The refresh executor's books (``GrantBook``), through its methods only.
struct GrantBookTests {
    static let t0 = Timestamp(secondsSince1970: 1_000)

    @Test(arguments: [0, 1, 3])
    func failuresCountUpFromTheLastSuccess(earlierFailures: Int) {
        var book = GrantBook()
        for _ in 0..<earlierFailures { _ = book.recordFailure(of: "alice") }
        #expect(book.nextAttempt(of: "alice") == earlierFailures + 1)
        #expect(book.recordFailure(of: "alice") == earlierFailures + 1)
        #expect(book.nextAttempt(of: "bob") == 1)
        book.setFailures(nil, of: "alice")
        #expect(book.nextAttempt(of: "alice") == 1)
        book.setFailures(5, of: "alice")
        #expect(book.nextAttempt(of: "alice") == 6)
    }

    @Test func forgettingACredentialClearsItsRecordOnly() {
        var book = GrantBook()
        for user in ["alice", "bob"] {
            _ = book.recordFailure(of: user)
            book.noteForcedRefresh(of: user, at: Self.t0)
            book.noteNarrowedGrant(of: user, key: "k", at: Self.t0, keepingAfter: Self.t0 - .seconds(60))
            book.noteNarrowedFailure(of: user, key: "k", "invalid_scope")
        }
        book.forget("alice")
        #expect(book.nextAttempt(of: "alice") == 1)
        #expect(book.lastForcedRefresh(of: "alice") == nil)
        #expect(book.lastNarrowedGrant(of: "alice", key: "k") == nil)
        #expect(book.narrowedGrants(of: "alice").isEmpty)
        #expect(book.lastNarrowedFailure(of: "alice", key: "k") == nil)
        #expect(book.nextAttempt(of: "bob") == 2)
        #expect(book.lastForcedRefresh(of: "bob") == Self.t0)
        #expect(book.lastNarrowedGrant(of: "bob", key: "k") == Self.t0)
        #expect(book.lastNarrowedFailure(of: "bob", key: "k") == "invalid_scope")
    }

    @Test func aNarrowedSuccessClearsTheFailureOfItsKey() {
        var book = GrantBook()
        book.noteNarrowedFailure(of: "alice", key: "a", "server_error")
        book.noteNarrowedFailure(of: "alice", key: "b", "invalid_scope")
        book.noteNarrowedFailure(of: "alice", key: "a", nil)
        #expect(book.lastNarrowedFailure(of: "alice", key: "a") == nil)
        #expect(book.lastNarrowedFailure(of: "alice", key: "b") == "invalid_scope")
    }

    /// A caller cycling through request keys does not grow the book past 16 keys plus the
    /// ones asked within the interval.
    @Test func oldNarrowedGrantRecordsGoOnceSixteenAreKept() {
        var book = GrantBook()
        for index in 0..<16 {
            book.noteNarrowedGrant(of: "alice", key: "old\(index)", at: Self.t0, keepingAfter: Self.t0 - .seconds(60))
        }
        #expect(book.narrowedGrants(of: "alice").count == 16)
        let later = Self.t0 + .seconds(120)
        book.noteNarrowedGrant(of: "alice", key: "new", at: later, keepingAfter: later - .seconds(60))
        #expect(book.narrowedGrants(of: "alice") == [later])
        #expect(book.lastNarrowedGrant(of: "alice", key: "old0") == nil)
    }

    @Test func aFlightEndsOnlyForItsOwnTask() async {
        var book = GrantBook()
        let first = Task<GrantResult, Never> { .failed(.unknownUser("alice")) }
        let second = Task<GrantResult, Never> { .failed(.unknownUser("alice")) }
        book.startNarrowedFlight(first, "alice\u{0}k")
        book.startNarrowedFlight(second, "alice\u{0}k")
        book.endNarrowedFlight(first, "alice\u{0}k")
        #expect(book.narrowedGrantInFlight("alice\u{0}k") == second)
        book.startFlight(first, of: "alice")
        #expect(book.grantInFlight(of: "alice") == first)
        #expect(book.allInFlight.count == 2)
        book.endFlight(of: "alice")
        book.endNarrowedFlight(second, "alice\u{0}k")
        #expect(book.grantInFlight(of: "alice") == nil)
        #expect(book.narrowedGrantInFlight("alice\u{0}k") == nil)
        #expect(book.allInFlight.isEmpty)
    }

    @Test func stoppingIsOneWay() {
        var book = GrantBook()
        #expect(!book.stoppingProactiveGrants)
        book.stopStartingProactiveGrants()
        #expect(book.stoppingProactiveGrants)
    }

    @Test(arguments: [(rate: 1.0, burst: 2), (rate: 10.0, burst: 1)])
    func theRateLimitReservesPlacesUntilReset(rate: Double, burst: Int) {
        var book = GrantBook()
        let provider = ProviderConfiguration(
            name: "p", kind: .exec(ExecSettings(command: ["/bin/true"])), rateLimit: rate, rateBurst: burst)
        for _ in 0..<burst { #expect(book.rateDelay(for: provider, now: Self.t0) == .zero) }
        let delay = book.rateDelay(for: provider, now: Self.t0)
        #expect(delay > .zero && delay <= .milliseconds(Int64(1000 / rate) + 1))
        book.resetRateLimits()
        #expect(book.rateDelay(for: provider, now: Self.t0) == .zero)
    }
}

import Testing
import TokendConfig
import TokendCore
import TokendStorage

@testable import TokendServer

/// When a node looks at a credential another node is refreshing, and whether it takes it over
/// then (``TakeOverCheck``, ``CredentialRegistry/isDueForAnyNode(_:provider:now:)``).
struct TakeOverCheckTests {
    static let t0 = Timestamp(millisecondsSince1970: 1_800_000_000_000)

    /// The check comes just after the lease as last heard ends.
    @Test func theCheckComesWhenTheLeaseEnds() {
        let lease = LeaseHolder(holder: "node-b", expiresAt: Self.t0 + .seconds(30))
        #expect(TakeOverCheck.checkTime(lease) == Self.t0 + .seconds(30) + TakeOverCheck.margin)
        #expect(TakeOverCheck.checkTime(lease) > lease.expiresAt)
    }

    /// A lease that lapsed (its holder died: it never releases) or is no longer known is taken
    /// over; one its live holder renewed is not, and is looked at again when the renewed lease
    /// ends. Each such check waits for a later end: a holder that keeps renewing keeps the
    /// credential, and there is no loop.
    @Test func aLapsedLeaseIsTakenOverARenewedOneIsNot() {
        var now = Self.t0
        var lease = LeaseHolder(holder: "node-b", expiresAt: now + .seconds(30))
        var checks: [Timestamp] = []
        for _ in 0..<3 {
            now = TakeOverCheck.checkTime(lease)
            // The holder renewed in the meantime (a new grant's marker).
            lease.expiresAt = now + .seconds(30)
            guard case .checkAgain(let at) = TakeOverCheck.step(lease: lease, now: now) else {
                Issue.record("a renewed lease was taken over")
                return
            }
            #expect(at > now)
            checks.append(at)
        }
        #expect(checks == checks.sorted() && Set(checks).count == checks.count)
        // It stops renewing (it died): taken over once the lease and the margin have passed.
        #expect(TakeOverCheck.step(lease: lease, now: lease.expiresAt) == .checkAgain(at: lease.expiresAt + TakeOverCheck.margin))
        #expect(TakeOverCheck.step(lease: lease, now: lease.expiresAt + TakeOverCheck.margin) == .takeOver)
        #expect(TakeOverCheck.step(lease: nil, now: Self.t0) == .takeOver)
    }

    static func entry(issuedAt: Timestamp, lifetime: Duration, status: RefreshStatus = RefreshStatus()) -> ViewEntry {
        let credential = Credential(
            userIdentifier: "alice", provider: "p", accessToken: SecretString("token"), refreshToken: SecretString("refresh"),
            tokenType: "Bearer", scope: nil, expiresAt: issuedAt + lifetime, issuedAt: issuedAt, sessionStartedAt: issuedAt,
            readers: [.uid(1000)], enrolment: Enrolment(uid: 1000, pid: 1, at: issuedAt), status: status)
        return ViewEntry(
            credential: credential, policy: RefreshPolicy(), resolvedReaders: ResolvedReaders(uids: [1000]), nextRefreshAt: nil)
    }

    /// An unmarked credential at a take-over check (its holder died before sending anything) is
    /// refreshed if its token is due for any node: the earliest point the jitter can give (here
    /// 0.8 − 0.05 of an hour) has come. Once the holder's result replaced the token it is not.
    @Test func anUnmarkedCredentialIsRefreshedOnlyIfItsTokenIsDueForSomeNode() {
        let provider = ProviderConfiguration(name: "p", kind: .exec(ExecSettings(command: ["/bin/true"])))
        let old = Self.entry(issuedAt: Self.t0, lifetime: .seconds(3600))
        let earliest = Self.t0 + .seconds(2700)
        #expect(!CredentialRegistry.isDueForAnyNode(old, provider: provider, now: earliest - .seconds(1)))
        #expect(CredentialRegistry.isDueForAnyNode(old, provider: provider, now: earliest))
        let replaced = Self.entry(
            issuedAt: earliest, lifetime: .seconds(3600), status: RefreshStatus(lastRefreshAt: earliest, refreshCount: 1))
        #expect(!CredentialRegistry.isDueForAnyNode(replaced, provider: provider, now: earliest + .seconds(5)))
        // A failed grant's retry is due at its retry time, on every node.
        let retrying = Self.entry(
            issuedAt: Self.t0, lifetime: .seconds(3600), status: RefreshStatus(state: .retrying, retryAt: Self.t0 + .seconds(60)))
        #expect(CredentialRegistry.isDueForAnyNode(retrying, provider: provider, now: Self.t0 + .seconds(60)))
    }
}

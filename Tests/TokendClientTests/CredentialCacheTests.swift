import Testing
import TokendClient

/// The in-process cache's decisions, with the time pinned.
struct CredentialCacheTests {
    static let now: Int64 = 1_900_000_000

    static func credentials(_ token: String, expiresIn: Int64, user: String = "alice") -> Credentials {
        Credentials(userIdentifier: user, accessToken: token, tokenType: "Bearer", expiresAt: now + expiresIn)
    }

    @Test func answersWhileTheTokenStaysValidForTheMinimumPlusTheMargin() {
        var cache = CredentialCache(policy: CachePolicy(safetyMargin: .seconds(5), maximumAge: .seconds(600)))
        cache.store(Self.credentials("t1", expiresIn: 100), now: Self.now)
        #expect(
            cache.lookup("alice", minValiditySeconds: 0, now: Self.now) == .hit(Self.credentials("t1", expiresIn: 100)))
        #expect(cache.lookup("alice", minValiditySeconds: 94, now: Self.now) != .miss)
        // 95 + 5 s margin is not less than the 100 s left.
        #expect(cache.lookup("alice", minValiditySeconds: 95, now: Self.now) == .miss)
        #expect(cache.lookup("alice", minValiditySeconds: 0, now: Self.now + 94) != .miss)
        #expect(cache.lookup("alice", minValiditySeconds: 0, now: Self.now + 95) == .miss)
        #expect(cache.lookup("bob", minValiditySeconds: 0, now: Self.now) == .miss)
    }

    @Test func answersForAtMostTheMaximumAge() {
        var cache = CredentialCache(policy: CachePolicy(maximumAge: .seconds(60)))
        cache.store(Self.credentials("t1", expiresIn: 3600), now: Self.now)
        #expect(cache.lookup("alice", minValiditySeconds: 0, now: Self.now + 59) != .miss)
        #expect(cache.lookup("alice", minValiditySeconds: 0, now: Self.now + 60) == .miss)
        // A clock that went backwards does not make an entry young forever.
        #expect(cache.lookup("alice", minValiditySeconds: 0, now: Self.now - 1) == .miss)
    }

    @Test func aRejectedCachedTokenIsDroppedAndNeverStoredAgain() {
        var cache = CredentialCache(policy: .default)
        cache.store(Self.credentials("t1", expiresIn: 3600), now: Self.now)
        #expect(cache.lookup("alice", minValiditySeconds: 0, rejectedToken: "t1", now: Self.now) == .miss)
        #expect(cache.entry(for: "alice") == nil)
        // A reply that was already on its way brings the rejected token back: not cached.
        cache.store(Self.credentials("t1", expiresIn: 3600), now: Self.now)
        #expect(cache.lookup("alice", minValiditySeconds: 0, now: Self.now) == .miss)
        cache.store(Self.credentials("t2", expiresIn: 3600), now: Self.now)
        #expect(
            cache.lookup("alice", minValiditySeconds: 0, now: Self.now) == .hit(Self.credentials("t2", expiresIn: 3600))
        )
    }

    @Test func aStaleRejectedTokenIsAnsweredWithTheNewerCachedOne() {
        var cache = CredentialCache(policy: .default)
        cache.store(Self.credentials("t2", expiresIn: 3600), now: Self.now)
        #expect(
            cache.lookup("alice", minValiditySeconds: 0, rejectedToken: "t1", now: Self.now)
                == .hit(Self.credentials("t2", expiresIn: 3600)))
    }

    @Test func theTokenThatExpiresLaterWins() {
        var cache = CredentialCache(policy: .default)
        cache.store(Self.credentials("new", expiresIn: 3600), now: Self.now)
        // A slower reply with the older token arrives afterwards.
        cache.store(Self.credentials("old", expiresIn: 1200), now: Self.now)
        #expect(cache.entry(for: "alice")?.credentials.accessToken == "new")
        // Once the kept one is no longer usable, anything newer replaces it.
        cache.store(Self.credentials("later", expiresIn: 1200), now: Self.now + 3600)
        #expect(cache.entry(for: "alice")?.credentials.accessToken == "later")
    }

    @Test func removalAndDisabling() {
        var cache = CredentialCache(policy: .default)
        cache.store(Self.credentials("t1", expiresIn: 3600), now: Self.now)
        cache.store(Self.credentials("b1", expiresIn: 3600, user: "bob"), now: Self.now)
        cache.remove("alice")
        #expect(cache.lookup("alice", minValiditySeconds: 0, now: Self.now) == .miss)
        #expect(cache.lookup("bob", minValiditySeconds: 0, now: Self.now) != .miss)
        cache.removeAll()
        #expect(cache.lookup("bob", minValiditySeconds: 0, now: Self.now) == .miss)

        var disabled = CredentialCache(policy: .disabled)
        disabled.store(Self.credentials("t1", expiresIn: 3600), now: Self.now)
        #expect(disabled.lookup("alice", minValiditySeconds: 0, now: Self.now) == .miss)
    }

    @Test(arguments: [Int64.min, -1, Int64.max])
    func extremeValuesNeitherTrapNorHit(minValidity: Int64) {
        var cache = CredentialCache(policy: .default)
        cache.store(
            Credentials(userIdentifier: "alice", accessToken: "t", tokenType: "Bearer", expiresAt: Int64.min),
            now: Self.now)
        #expect(cache.lookup("alice", minValiditySeconds: minValidity, now: Self.now) == .miss)
        cache.removeAll()
        cache.store(
            Credentials(userIdentifier: "alice", accessToken: "t", tokenType: "Bearer", expiresAt: Int64.max),
            now: Self.now)
        let lookup = cache.lookup("alice", minValiditySeconds: minValidity, now: Self.now)
        #expect(minValidity == Int64.max ? lookup == .miss : lookup != .miss)
    }
}

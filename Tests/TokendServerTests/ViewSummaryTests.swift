import Testing
import TokendCore
import TokendTestSupport

@testable import TokendServer

/// The counts `Status` and `STATUS=` report without walking the view (``ViewSummary``, the time
/// indexes under it, ``ReaderIndex``), each checked against walking every entry, over seeded
/// random changes.
struct ViewSummaryTests {
    @Test(arguments: [1, 2, 3] as [UInt64])
    func earliestTimesMatchesAListOfTimes(seed: UInt64) {
        var random = SeededGenerator(seed: seed)
        var times = EarliestTimes()
        var model: [Int64] = []
        for _ in 0..<5_000 {
            if model.isEmpty || Int.random(in: 0..<3, using: &random) > 0 {
                // Few distinct values: repeats, and times removed and added again.
                let time = Int64.random(in: 0..<200, using: &random)
                times.insert(time)
                model.append(time)
            } else if Bool.random(using: &random) {
                let index = Int.random(in: 0..<model.count, using: &random)
                times.remove(model.remove(at: index))
            } else {
                let limit = Int64.random(in: 0..<200, using: &random)
                let popped = times.popEarliest(atOrBefore: limit)
                if let minimum = model.min(), minimum <= limit {
                    #expect(popped?.time == minimum)
                    #expect(popped?.count == model.filter { $0 == minimum }.count)
                    model.removeAll { $0 == minimum }
                } else {
                    #expect(popped == nil)
                }
            }
            #expect(times.earliest() == model.min())
            #expect(times.total == model.count)
        }
    }

    @Test(arguments: [4, 5, 6] as [UInt64])
    func passedTimesCountsWhatNowHasPassedAlsoWhenTheClockStepsBack(seed: UInt64) {
        var random = SeededGenerator(seed: seed)
        var passed = PassedTimes()
        var model: [Int64] = []
        var now: Int64 = 500
        for _ in 0..<5_000 {
            switch Int.random(in: 0..<10, using: &random) {
            case 0..<4:
                let time = Int64.random(in: 0..<2_000, using: &random)
                passed.insert(time)
                model.append(time)
            case 4..<6 where !model.isEmpty:
                passed.remove(model.remove(at: Int.random(in: 0..<model.count, using: &random)))
            case 9:
                // The wall clock set back (or forward) by up to a few hundred milliseconds.
                now += Int64.random(in: -300...300, using: &random)
            default:
                now += Int64.random(in: 0...20, using: &random)
            }
            #expect(passed.count(atOrBefore: now) == model.filter { $0 <= now }.count)
        }
    }

    static let providerPolicy = RefreshPolicy()

    static func entry(_ user: String, state: CredentialState, deadline: Int64, next: Int64?, readers: [Reader] = [.uid(1000)])
        -> ViewEntry
    {
        let credential = Credential(
            userIdentifier: user, provider: "p", accessToken: SecretString("t-\(user)"), refreshToken: SecretString("r"),
            tokenType: "Bearer", scope: nil, expiresAt: Timestamp(millisecondsSince1970: deadline),
            issuedAt: Timestamp(millisecondsSince1970: deadline - 3_600_000), sessionStartedAt: Timestamp(millisecondsSince1970: 0),
            readers: readers, enrolment: Enrolment(uid: 1000, pid: 1, at: Timestamp(millisecondsSince1970: 0)),
            status: RefreshStatus(state: state))
        var uids: Set<UInt32> = []
        var gids: Set<UInt32> = []
        var programs: [ProgramReader] = []
        for reader in readers {
            switch reader {
            case .uid(let uid): uids.insert(uid)
            case .gid(let gid): gids.insert(gid)
            case .unit(let name): programs.append(ProgramReader(uid: nil, program: .unit(name)))
            case .combined(.uid(let uid), let program): programs.append(ProgramReader(uid: uid, program: program))
            default: break
            }
        }
        return ViewEntry(
            credential: credential, policy: providerPolicy, resolvedReaders: ResolvedReaders(uids: uids, gids: gids, programs: programs),
            nextRefreshAt: next.map { Timestamp(millisecondsSince1970: $0) })
    }

    /// Stores, replacements and removals in a real ``CredentialView``; after each, its counts
    /// equal a walk over its entries, at a moving now that sometimes steps back.
    @Test(arguments: [7, 8] as [UInt64])
    func theViewsCountsEqualAWalkOverItsEntries(seed: UInt64) {
        var random = SeededGenerator(seed: seed)
        let view = CredentialView(shardCount: 4)
        var now: Int64 = 1_000_000
        let states = CredentialState.allCases
        view.replaceAll(
            with: (0..<50).map {
                Self.entry(
                    "u\($0)", state: states.randomElement(using: &random)!, deadline: now + Int64.random(in: -500...5_000, using: &random),
                    next: Bool.random(using: &random) ? now + Int64.random(in: -500...5_000, using: &random) : nil)
            })
        for _ in 0..<3_000 {
            let user = "u\(Int.random(in: 0..<80, using: &random))"
            if Int.random(in: 0..<5, using: &random) == 0 {
                view.remove(user)
            } else {
                view.store(
                    Self.entry(
                        user, state: states.randomElement(using: &random)!, deadline: now + Int64.random(in: -500...5_000, using: &random),
                        next: Bool.random(using: &random) ? now + Int64.random(in: -500...5_000, using: &random) : nil))
            }
            now += Int.random(in: 0..<10, using: &random) == 0 ? -200 : Int64.random(in: 0...30, using: &random)
            let at = Timestamp(millisecondsSince1970: now)
            #expect(view.counts(now: at) == ViewSummary.counts(of: view.unsortedSnapshot(), now: at))
        }
    }

    /// For callers of every kind, the entries the index offers hold every entry the caller may
    /// inspect: filtering them gives exactly what filtering every entry gives.
    @Test func theReaderIndexOffersEveryCredentialACallerMayRead() {
        let view = CredentialView(shardCount: 4)
        let readerLists: [[Reader]] = [
            [.uid(1000)], [.uid(1001)], [.gid(50)], [.uid(1000), .gid(60)], [.unit("backup.service")],
            [.combined(.uid(1001), .unit("backup.service"))], [.gid(60)], [],
        ]
        var entries: [ViewEntry] = []
        for (index, readers) in readerLists.enumerated() {
            for copy in 0..<3 { entries.append(Self.entry("c\(index)-\(copy)", state: .valid, deadline: 10, next: nil, readers: readers)) }
        }
        view.replaceAll(with: entries)
        // Readers change: the index follows.
        view.store(Self.entry("c0-0", state: .valid, deadline: 10, next: nil, readers: [.gid(50)]))
        view.remove("c1-0")
        let policy = AccessPolicy()
        let callers = [
            CallerIdentity(uid: 1000, gid: 1000, pid: 1), CallerIdentity(uid: 1001, gid: 1001, pid: 1, supplementaryGroups: [60]),
            CallerIdentity(uid: 1002, gid: 50, pid: 1), CallerIdentity(uid: 1003, gid: 1003, pid: 1),
        ]
        for caller in callers {
            let expected = Set(
                view.unsortedSnapshot().filter { policy.mayInspect(caller, readers: $0.resolvedReaders) }.map(\.userIdentifier))
            let offered = view.entriesPossiblyReadable(by: caller)
            #expect(Set(offered.filter { policy.mayInspect(caller, readers: $0.resolvedReaders) }.map(\.userIdentifier)) == expected)
            #expect(offered.count < view.count, "the index offered every credential to \(caller)")
        }
    }
}

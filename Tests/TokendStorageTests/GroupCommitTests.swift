import Foundation
import Synchronization
import Testing
import TokendCore

@testable import TokendStorage

/// Group commit, `beginGrant`, and the statement-level pieces that came with them.
struct GroupCommitTests {
    let keyring = Keyring(current: Fixture.key(1))

    @Test func writesSubmittedTogetherCommitInOneTransactionEachWithItsOwnResult() async throws {
        try await withTemporaryDirectory { directory in
            let store = try openStore(directory, keyring: keyring)
            let stored = try await withThrowingTaskGroup(of: Credential.self) { group in
                for index in 0..<20 {
                    group.addTask { try await store.insert(Fixture.credential("user-\(index)"), replacing: false) }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(Set(stored.map(\.userIdentifier)).count == 20)
            #expect(Set(stored.map(\.generation)).count == 20, "every write gets its own generation")
            for credential in stored {
                #expect(try await store.load(userIdentifier: credential.userIdentifier) == credential)
            }
            try await store.close()
        }
    }

    @Test func aFailingWriteRollsBackOnlyItselfInsideItsGroup() async throws {
        try await withTemporaryDirectory { directory in
            let store = try openStore(directory, keyring: keyring)
            let alice = try await store.insert(Fixture.credential("alice"), replacing: false)
            // Both wait up to 300 ms for company, so they share one group: a good update, and a
            // write that changes alice's row and then fails.
            let newer = alice.with(accessToken: "access-newer")
            async let good = store.update(newer, expectedGeneration: alice.generation, grouping: .milliseconds(300))
            async let failing: Bool = {
                do {
                    _ = try await store.write("fail on purpose", grouping: .milliseconds(300), singleChange: false) { db in
                        try db.execute(sql: "UPDATE credentials SET scope = 'changed by a failed write' WHERE user_identifier = 'alice'")
                        throw StorageError(code: .conflict, message: "failing on purpose")
                    }
                    return false
                } catch {
                    return true
                }
            }()
            let (updated, failed) = try await (good, failing)
            #expect(failed, "the failing write reported its error")
            let stored = try await store.load(userIdentifier: "alice")
            #expect(stored?.scope == alice.scope, "its change was rolled back with its savepoint")
            #expect(stored?.accessToken == SecretString("access-newer"), "the good write in the same group committed")
            #expect(stored?.generation == updated.generation)
            try await store.close()
        }
    }

    @Test func aStaleCompareAndSwapInAGroupIsAConflict() async throws {
        try await withTemporaryDirectory { directory in
            let store = try openStore(directory, keyring: keyring)
            let alice = try await store.insert(Fixture.credential("alice"), replacing: false)
            async let good = store.update(
                alice.with(accessToken: "access-newer"), expectedGeneration: alice.generation, grouping: .milliseconds(200))
            async let stale: StorageError? = {
                do {
                    _ = try await store.update(
                        alice.with(accessToken: "access-stale"), expectedGeneration: alice.generation - 1, grouping: .milliseconds(200))
                    return nil
                } catch {
                    return error as? StorageError
                }
            }()
            let (_, conflict) = try await (good, stale)
            #expect(conflict?.code == .conflict)
            #expect(try await store.load(userIdentifier: "alice")?.accessToken == SecretString("access-newer"))
            try await store.close()
        }
    }

    @Test func writesAfterSQLiteEndedTheGroupsTransactionFailInsteadOfCommittingAlone() async throws {
        try await withTemporaryDirectory { directory in
            let store = try openStore(directory, keyring: keyring)
            let alice = try await store.insert(Fixture.credential("alice"), replacing: false)
            let bob = try await store.insert(Fixture.credential("bob"), replacing: false)
            // The first write ends the transaction the way SQLite does after a full disk or an
            // I/O error. The next write has no savepoint of its own: it must not run in
            // autocommit mode and be stored while its caller is told the group failed. The first
            // would wait a minute for company; the second joins its group and sends it at once.
            async let ending: Bool = {
                do {
                    _ = try await store.write("end the transaction", grouping: .seconds(60), singleChange: true) { db in
                        try db.execute(sql: "UPDATE credentials SET scope = 'lost' WHERE user_identifier = 'alice'")
                        try db.execute(sql: "ROLLBACK")
                    }
                    return false
                } catch {
                    return true
                }
            }()
            for _ in 0..<1000 where store.waitingWritesForTesting() == 0 {
                try await Task.sleep(for: .milliseconds(10))
            }
            async let next: StorageError? = {
                do {
                    _ = try await store.update(bob.with(accessToken: "access-newer"), expectedGeneration: bob.generation)
                    return nil
                } catch {
                    return error as? StorageError
                }
            }()
            let (endingFailed, nextError) = await (ending, next)
            #expect(endingFailed, "the write whose transaction ended learns that it was not stored")
            #expect(nextError?.code == .database, "the write after it fails too: \(String(describing: nextError))")
            #expect(try await store.load(userIdentifier: "alice") == alice)
            #expect(try await store.load(userIdentifier: "bob") == bob, "nothing of the failed group was stored")
            // And the store goes on: the next group commits, with a newer generation.
            let updated = try await store.update(bob.with(accessToken: "access-newer"), expectedGeneration: bob.generation)
            #expect(updated.generation > bob.generation)
            try await store.close()
        }
    }

    @Test func generationsKeepGrowingAcrossGroupsFailuresAndReopening() async throws {
        try await withTemporaryDirectory { directory in
            var store = try openStore(directory, keyring: keyring)
            let alice = try await store.insert(Fixture.credential("alice"), replacing: false)
            let updated = try await store.update(alice.with(accessToken: "access-2"), expectedGeneration: alice.generation)
            // A conflict takes a generation and stores nothing; the counter still only grows.
            await #expect(throws: StorageError.self) {
                _ = try await store.update(alice.with(accessToken: "access-stale"), expectedGeneration: alice.generation)
            }
            // The counter is saved with each group: the file says what was handed out last.
            let saved = try await store.read("read the counter") { db in
                try Int64.fetchOne(db, sql: "SELECT value FROM meta WHERE key = 'last_generation'")
            }
            #expect((saved ?? 0) >= updated.generation)
            try await store.close()
            store = try openStore(directory, keyring: keyring)
            let bob = try await store.insert(Fixture.credential("bob"), replacing: false)
            #expect(bob.generation > updated.generation, "a reopened store continues above every stored generation")
            let bulk = try await store.insertBulk([Fixture.credential("carol"), Fixture.credential("dave")])
            #expect(bulk == 2)
            let carol = try await store.load(userIdentifier: "carol")
            let dave = try await store.load(userIdentifier: "dave")
            #expect(carol.map(\.generation) == bob.generation + 1 && dave.map(\.generation) == bob.generation + 2)
            try await store.close()
        }
    }

    @Test func aWriteThatMayWaitIsSentAtOnceWhenAnImpatientOneJoins() async throws {
        try await withTemporaryDirectory { directory in
            let store = try openStore(directory, keyring: keyring)
            let alice = try await store.insert(Fixture.credential("alice"), replacing: false)
            let newer = alice.with(accessToken: "access-newer")
            let clock = ContinuousClock()
            let started = clock.now
            // Willing to wait a minute, but the insert that follows wants its group now.
            async let patient = store.update(newer, expectedGeneration: alice.generation, grouping: .seconds(60))
            try await Task.sleep(for: .milliseconds(50))
            _ = try await store.insert(Fixture.credential("bob"), replacing: false)
            _ = try await patient
            #expect(clock.now - started < .seconds(30), "the patient write went with the impatient one's group")
            #expect(try await store.load(userIdentifier: "alice")?.accessToken == SecretString("access-newer"))
            try await store.close()
        }
    }

    @Test func aLingeringGroupIsCommittedWhenItsWaitIsOver() async throws {
        try await withTemporaryDirectory { directory in
            let store = try openStore(directory, keyring: keyring)
            let alice = try await store.insert(Fixture.credential("alice"), replacing: false)
            let newer = alice.with(accessToken: "access-newer")
            let stored = try await store.update(newer, expectedGeneration: alice.generation, grouping: .milliseconds(30))
            #expect(stored.generation > alice.generation)
            // Durable when it returned: a second connection (a new store) sees it.
            try await store.close()
            let reopened = try openStore(directory, keyring: keyring)
            #expect(try await reopened.load(userIdentifier: "alice")?.accessToken == SecretString("access-newer"))
            try await reopened.close()
        }
    }

    @Test func durableWritesAfterAGrantMarkerAreFsyncedAgain() async throws {
        try await withTemporaryDirectory { directory in
            let store = try openStore(directory, keyring: keyring)
            _ = try await store.insert(Fixture.credential("alice"), replacing: false)
            _ = try await store.beginGrant(userIdentifier: "alice", startedAt: Timestamp(millisecondsSince1970: 5), grouping: .zero) { _ in
                true
            }
            #expect(try await store.pragmaForTesting("synchronous") == "1", "the marker's group ran with NORMAL")
            _ = try await store.insert(Fixture.credential("bob"), replacing: false)
            #expect(try await store.pragmaForTesting("synchronous") == "2", "the next durable group set FULL again")
            try await store.close()
        }
    }

    @Test func beginGrantMarksTheCredentialInFlightInOneWrite() async throws {
        try await withTemporaryDirectory { directory in
            let store = try openStore(directory, keyring: keyring)
            let alice = try await store.insert(Fixture.credential("alice"), replacing: false)
            let startedAt = Timestamp(millisecondsSince1970: 1_700_000_000_000)
            let seen = Mutex<Credential?>(nil)
            let start = try await store.beginGrant(userIdentifier: "alice", startedAt: startedAt, grouping: .zero) { credential in
                seen.withLock { $0 = credential }
                return true
            }
            #expect(seen.withLock { $0 } == alice, "the decision saw the stored credential, tokens decrypted")
            guard case .started(let marked) = start else {
                Issue.record("expected .started, got \(String(describing: start))")
                return
            }
            #expect(marked.status.state == .refreshing)
            #expect(marked.status.grantStartedAt == startedAt)
            #expect(marked.generation > alice.generation)
            #expect(marked.refreshToken == alice.refreshToken)
            #expect(try await store.load(userIdentifier: "alice") == marked)
            try await store.close()
        }
    }

    @Test func beginGrantLeavesADeclinedCredentialAndReportsAMissingOne() async throws {
        try await withTemporaryDirectory { directory in
            let store = try openStore(directory, keyring: keyring)
            let alice = try await store.insert(Fixture.credential("alice"), replacing: false)
            let declined = try await store.beginGrant(
                userIdentifier: "alice", startedAt: Timestamp(millisecondsSince1970: 1), grouping: .zero
            ) { _ in false }
            guard case .declined(let unchanged) = declined else {
                Issue.record("expected .declined, got \(String(describing: declined))")
                return
            }
            #expect(unchanged == alice)
            #expect(try await store.load(userIdentifier: "alice") == alice, "nothing written")
            let missing = try await store.beginGrant(
                userIdentifier: "nobody", startedAt: Timestamp(millisecondsSince1970: 1), grouping: .zero
            ) { _ in true }
            #expect(missing == nil)
            try await store.close()
        }
    }

    @Test func theProtocolsTwoStepBeginGrantMatchesTheOneTransactionVersion() async throws {
        try await withTemporaryDirectory { directory in
            let sqlite = try openStore(directory, keyring: keyring)
            let alice = try await sqlite.insert(Fixture.credential("alice"), replacing: false)
            // The default implementation (a read and a status write), as other stores get it.
            let store = RequirementsOnlyStore(base: sqlite)
            let startedAt = Timestamp(millisecondsSince1970: 77)
            guard
                case .started(let marked) = try await store.beginGrant(
                    userIdentifier: "alice", startedAt: startedAt, grouping: .zero, shouldStart: { _ in true })
            else {
                Issue.record("expected .started")
                return
            }
            #expect(marked.status.state == .refreshing && marked.status.grantStartedAt == startedAt)
            #expect(marked.generation > alice.generation)
            #expect(try await sqlite.load(userIdentifier: "alice") == marked)
            try await sqlite.close()
        }
    }

    @Test func saltsAreFreshAndFullLength() {
        let salts = (0..<200).map { _ in CredentialCipher.makeSalt() }
        #expect(salts.allSatisfy { $0.count == CredentialCipher.saltByteCount })
        #expect(Set(salts).count == salts.count)
        #expect(salts.allSatisfy { $0.contains { $0 != 0 } })
    }

    @Test func readerListsRoundTripAndMalformedOnesAreTypedProblems() throws {
        let readers: [Reader] = [Reader("uid:1000")!, Reader("gid:27")!, Reader("group:backup")!]
        let text = ReaderListCoding.encode(readers)
        #expect(text == #"["uid:1000","gid:27","group:backup"]"#)
        #expect(try ReaderListCoding.decode(text) == readers)
        // What Foundation's JSONEncoder wrote before: the same text is read.
        let foundation = String(decoding: try JSONEncoder().encode(readers.map(\.description)), as: UTF8.self)
        #expect(try ReaderListCoding.decode(foundation) == readers)
        #expect(throws: ReaderListCoding.Problem.notAnArrayOfStrings) { try ReaderListCoding.decode("{}") }
        #expect(throws: ReaderListCoding.Problem.notAnArrayOfStrings) { try ReaderListCoding.decode("[1]") }
        #expect(throws: ReaderListCoding.Problem.notAnArrayOfStrings) { try ReaderListCoding.decode("[\"uid:1\"") }
        #expect(throws: ReaderListCoding.Problem.unknownReader("pid:4")) { try ReaderListCoding.decode(#"["pid:4"]"#) }
    }
}

extension Credential {
    fileprivate func with(accessToken: String) -> Credential {
        var changed = self
        changed.accessToken = SecretString(accessToken)
        return changed
    }
}

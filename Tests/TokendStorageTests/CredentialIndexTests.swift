import Foundation
import Testing
import TokendCore

@testable import TokendStorage

/// The start-up read (`loadIndex`) and the bulk insert used by the benchmarks.
struct CredentialIndexTests {
    let keyring = Keyring(current: Fixture.key(1))

    @Test func theIndexHoldsEveryCredentialWithItsTokenOpenedOnDemand() async throws {
        try await withTemporaryDirectory { directory in
            let store = try openStore(directory, keyring: keyring)
            var alice = Fixture.credential("alice")
            alice.status = RefreshStatus(
                state: .retrying, lastRefreshAt: Timestamp(millisecondsSince1970: 11), lastError: "503", refreshCount: 4,
                grantStartedAt: Timestamp(millisecondsSince1970: 22), retryAt: Timestamp(millisecondsSince1970: 33))
            _ = try await store.insert(alice, replacing: false)
            _ = try await store.insert(Fixture.credential("bob", provider: "other", refreshToken: nil, scope: nil), replacing: false)
            let all = try await store.loadAll()
            let index = try await store.loadIndex().sorted { $0.metadata.userIdentifier < $1.metadata.userIdentifier }
            #expect(index.map(\.metadata.userIdentifier) == ["alice", "bob"])
            #expect(index.map(\.hasRefreshToken) == [true, false])
            for (indexed, full) in zip(index, all) {
                #expect(!indexed.accessToken.isPlain)
                #expect(indexed.metadata.refreshToken == nil)
                #expect(indexed.metadata.accessToken.isEmpty)
                var expected = full
                expected.accessToken = SecretString("")
                expected.refreshToken = nil
                #expect(indexed.metadata == expected)
                #expect(try indexed.accessToken.open(userIdentifier: full.userIdentifier, provider: full.provider) == full.accessToken)
            }
            // Read from the store when opened: a newer token is what it gives.
            var newer = all[0]
            newer.accessToken = SecretString(Fixture.token("newer"))
            _ = try await store.update(newer, expectedGeneration: newer.generation)
            #expect(try index[0].accessToken.open(userIdentifier: "alice", provider: alice.provider) == newer.accessToken)
            // Bound to the provider too: asking with another one finds nothing.
            #expect(throws: StorageError.self) { try index[0].accessToken.open(userIdentifier: "alice", provider: "other") }
            try await store.close()
        }
    }

    @Test func aDamagedTokenFailsWhenOpenedNotWhenIndexed() async throws {
        try await withTemporaryDirectory { directory in
            let store = try openStore(directory, keyring: keyring)
            let alice = Fixture.credential("alice")
            _ = try await store.insert(alice, replacing: false)
            _ = try await store.insert(Fixture.credential("bob"), replacing: false)
            try await store.executeForTesting(
                "UPDATE credentials SET access_token = (SELECT access_token FROM credentials WHERE user_identifier = 'bob') WHERE user_identifier = 'alice'"
            )
            let index = try await store.loadIndex().sorted { $0.metadata.userIdentifier < $1.metadata.userIdentifier }
            let error = #expect(throws: StorageError.self) {
                try index[0].accessToken.open(userIdentifier: "alice", provider: alice.provider)
            }
            #expect(error?.code == .decryption)
            #expect(try index[1].accessToken.open(userIdentifier: "bob", provider: alice.provider).isEmpty == false)
            try await store.close()
            let closed = #expect(throws: StorageError.self) {
                try index[1].accessToken.open(userIdentifier: "bob", provider: alice.provider)
            }
            #expect(closed?.code == .closed)
        }
    }

    @Test func theDefaultIndexOfAnyStoreIsItsLoadAll() async throws {
        try await withTemporaryDirectory { directory in
            let store = try openStore(directory, keyring: keyring)
            let alice = Fixture.credential("alice")
            _ = try await store.insert(alice, replacing: false)
            let plain = RequirementsOnlyStore(base: store)
            let index = try await plain.loadIndex()
            #expect(index.count == 1)
            #expect(index[0].accessToken.isPlain)
            #expect(try index[0].accessToken.open(userIdentifier: "alice", provider: alice.provider) == alice.accessToken)
            #expect(index[0].hasRefreshToken)
            try await store.close()
        }
    }

    @Test func bulkInsertGivesEachCredentialItsOwnGenerationAndRefusesDuplicates() async throws {
        try await withTemporaryDirectory { directory in
            let store = try openStore(directory, keyring: keyring)
            let credentials = (0..<25).map { Fixture.credential("user-\($0)") }
            #expect(try await store.insertBulk(credentials, batchSize: 10) == 25)
            let loaded = try await store.loadAll()
            #expect(loaded.count == 25)
            #expect(Set(loaded.map(\.generation)).count == 25)
            let tokens = Dictionary(uniqueKeysWithValues: credentials.map { ($0.userIdentifier, $0.accessToken) })
            #expect(loaded.allSatisfy { tokens[$0.userIdentifier] == $0.accessToken })
            await expectStorageError(.alreadyExists) { _ = try await store.insertBulk([Fixture.credential("user-3")]) }
            #expect(try await store.loadAll().count == 25)
            try await store.close()
        }
    }
}

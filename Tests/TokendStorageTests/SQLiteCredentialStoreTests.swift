import Foundation
import Testing
import TokendCore

@testable import TokendStorage

struct SQLiteCredentialStoreTests {
    let keyring = Keyring(current: Fixture.key(1))

    @Test func insertedCredentialLoadsBackWithEveryField() async throws {
        try await withTemporaryDirectory { directory in
            let store = try openStore(directory, keyring: keyring)
            var alice = Fixture.credential("alice")
            alice.status = RefreshStatus(
                state: .retrying,
                lastRefreshAt: Timestamp(millisecondsSince1970: 11),
                lastError: "token endpoint answered 503",
                refreshCount: 42,
                grantStartedAt: Timestamp(millisecondsSince1970: 22),
                retryAt: Timestamp(millisecondsSince1970: 33)
            )
            alice.dpopKey = SecretString("-----BEGIN PRIVATE KEY-----\nfixture-dpop-key\n-----END PRIVATE KEY-----\n")
            alice.narrowedTokens = [
                NarrowedToken(
                    key: "read\u{1F}", scope: "read", resource: nil, accessToken: SecretString("narrowed-\"quoted\"-token"),
                    tokenType: "Bearer",
                    issuedAt: Timestamp(millisecondsSince1970: 1_000), expiresAt: Timestamp(millisecondsSince1970: 3_601_000),
                    enrolledAt: Timestamp(millisecondsSince1970: 0)),
                NarrowedToken(
                    key: "\u{1F}https://api.test/", scope: nil, resource: "https://api.test/", accessToken: SecretString("narrowed-2"),
                    tokenType: "Bearer", issuedAt: Timestamp(millisecondsSince1970: 2_000),
                    expiresAt: Timestamp(millisecondsSince1970: 62_000), enrolledAt: Timestamp(millisecondsSince1970: 0)),
            ]
            let bob = Fixture.credential("bob", provider: "other", refreshToken: nil, scope: nil)
            let storedAlice = try await store.insert(alice, replacing: false)
            let storedBob = try await store.insert(bob, replacing: false)
            #expect(storedAlice.generation > 0)
            #expect(storedBob.generation > storedAlice.generation)

            var expectedAlice = alice
            expectedAlice.generation = storedAlice.generation
            #expect(try await store.load(userIdentifier: "alice") == expectedAlice)
            #expect(try await store.loadAll() == [storedAlice, storedBob])
            #expect(try await store.load(userIdentifier: "carol") == nil)
            try await store.close()
        }
    }

    @Test func insertRefusesAnExistingCredentialUnlessReplacing() async throws {
        try await withTemporaryDirectory { directory in
            let store = try openStore(directory, keyring: keyring)
            let first = try await store.insert(Fixture.credential("alice"), replacing: false)
            let second = Fixture.credential("alice")
            let error = await expectStorageError(.alreadyExists) {
                _ = try await store.insert(second, replacing: false)
            }
            #expect(error?.message.contains("alice") == true)
            #expect(try await store.load(userIdentifier: "alice") == first)

            let replaced = try await store.insert(second, replacing: true)
            #expect(replaced.generation > first.generation)
            #expect(try await store.load(userIdentifier: "alice")?.accessToken == second.accessToken)
            try await store.close()
        }
    }

    @Test func updateIsACompareAndSwapOnTheGeneration() async throws {
        try await withTemporaryDirectory { directory in
            let store = try openStore(directory, keyring: keyring)
            let original = try await store.insert(Fixture.credential("alice"), replacing: false)

            var refreshed = original
            refreshed.accessToken = SecretString(Fixture.token("at2"))
            refreshed.refreshToken = SecretString(Fixture.token("rt2"))
            refreshed.status.refreshCount += 1
            let stored = try await store.update(refreshed, expectedGeneration: original.generation)
            #expect(stored.generation > original.generation)
            #expect(try await store.load(userIdentifier: "alice") == stored)

            // A writer still holding the old generation must not overwrite the newer token.
            var stale = original
            stale.accessToken = SecretString(Fixture.token("stale"))
            let error = await expectStorageError(.conflict) {
                _ = try await store.update(stale, expectedGeneration: original.generation)
            }
            #expect(error?.message.contains("stored generation \(stored.generation)") == true)
            #expect(try await store.load(userIdentifier: "alice") == stored)

            #expect(try await store.remove(userIdentifier: "alice"))
            await expectStorageError(.notFound) {
                _ = try await store.update(stored, expectedGeneration: stored.generation)
            }
            try await store.close()
        }
    }

    @Test func updateStatusWritesOnlyTheStatusAndBumpsTheGeneration() async throws {
        try await withTemporaryDirectory { directory in
            let store = try openStore(directory, keyring: keyring)
            let original = try await store.insert(Fixture.credential("alice"), replacing: false)
            let inFlight = RefreshStatus(
                state: .refreshing,
                refreshCount: 3,
                grantStartedAt: Timestamp(millisecondsSince1970: 99)
            )
            let generation = try await store.updateStatus(
                userIdentifier: "alice",
                status: inFlight,
                expectedGeneration: original.generation
            )
            #expect(generation > original.generation)
            var expected = original
            expected.status = inFlight
            expected.generation = generation
            #expect(try await store.load(userIdentifier: "alice") == expected)

            await expectStorageError(.conflict) {
                try await store.updateStatus(
                    userIdentifier: "alice",
                    status: RefreshStatus(),
                    expectedGeneration: original.generation
                )
            }
            await expectStorageError(.notFound) {
                try await store.updateStatus(userIdentifier: "nobody", status: RefreshStatus(), expectedGeneration: 1)
            }
            #expect(try await store.load(userIdentifier: "alice") == expected)
            try await store.close()
        }
    }

    @Test func removeSaysWhetherThereWasACredential() async throws {
        try await withTemporaryDirectory { directory in
            let store = try openStore(directory, keyring: keyring)
            _ = try await store.insert(Fixture.credential("alice"), replacing: false)
            #expect(try await store.remove(userIdentifier: "alice"))
            #expect(try await store.load(userIdentifier: "alice") == nil)
            #expect(try await store.remove(userIdentifier: "alice") == false)
            try await store.close()
        }
    }

    @Test func generationsAreNeverReusedAcrossRemoveAndReinsert() async throws {
        try await withTemporaryDirectory { directory in
            let store = try openStore(directory, keyring: keyring)
            let first = try await store.insert(Fixture.credential("alice"), replacing: false)
            try await store.remove(userIdentifier: "alice")
            let second = try await store.insert(Fixture.credential("alice"), replacing: false)
            #expect(second.generation > first.generation)
            // The writer that read the first incarnation cannot overwrite the second.
            await expectStorageError(.conflict) {
                _ = try await store.update(first, expectedGeneration: first.generation)
            }
            try await store.close()

            // …nor after a restart: the counter is saved with each group that drew from it
            // (`GenerationCounter`), not only kept in memory.
            let reopened = try openStore(directory, keyring: keyring)
            let third = try await reopened.insert(Fixture.credential("bob"), replacing: false)
            #expect(third.generation > second.generation)
            try await reopened.close()
        }
    }

    @Test func committedWritesAreThereAfterReopening() async throws {
        try await withTemporaryDirectory { directory in
            let store = try openStore(directory, keyring: keyring)
            let alice = try await store.insert(Fixture.credential("alice"), replacing: false)
            let bob = try await store.insert(Fixture.credential("bob"), replacing: false)
            var refreshed = bob
            refreshed.accessToken = SecretString(Fixture.token("at2"))
            let newBob = try await store.update(refreshed, expectedGeneration: bob.generation)
            try await store.close()

            let reopened = try openStore(directory, keyring: keyring)
            #expect(try await reopened.loadAll() == [alice, newBob])
            try await reopened.close()
        }
    }

    @Test func connectionsAreDurableAndFilesPrivate() async throws {
        try await withTemporaryDirectory { directory in
            let state = "\(directory)/state/tokend"
            let store = try openStore(state, keyring: keyring)
            _ = try await store.insert(Fixture.credential("alice"), replacing: false)
            #expect(try await store.pragmaForTesting("journal_mode") == "wal")
            #expect(try await store.pragmaForTesting("synchronous") == "2")  // FULL
            #expect(try await store.pragmaForTesting("secure_delete") == "1")
            #expect(try await store.pragmaForTesting("temp_store") == "2")  // MEMORY
            #expect(try await store.pragmaForTesting("foreign_keys") == "1")
            let busyTimeout = try await store.pragmaForTesting("busy_timeout")
            #expect(busyTimeout == "5000")
            #expect(permissions(state) == 0o700)
            #expect(permissions("\(state)/tokend.sqlite") == 0o600)
            #expect(permissions("\(state)/tokend.sqlite-wal") == 0o600)
            #expect(permissions("\(state)/tokend.sqlite-shm") == 0o600)
            try await store.close()
        }
    }

    @Test func aDatabaseOthersCouldReadIsRestrictedOnOpen() async throws {
        try await withTemporaryDirectory { directory in
            try await openStore(directory, keyring: keyring).close()
            let path = "\(directory)/tokend.sqlite"
            #expect(chmod(path, 0o644) == 0)
            try await openStore(directory, keyring: keyring).close()
            #expect(permissions(path) == 0o600)
        }
    }

    @Test func aCiphertextMovedToAnotherRowOrColumnFailsToOpen() async throws {
        try await withTemporaryDirectory { directory in
            let store = try openStore(directory, keyring: keyring)
            _ = try await store.insert(Fixture.credential("alice"), replacing: false)
            _ = try await store.insert(Fixture.credential("bob"), replacing: false)
            // Give alice bob's access token, salt and all: the binding to the user still fails it.
            try await store.executeForTesting(
                """
                UPDATE credentials SET
                    access_token = (SELECT access_token FROM credentials WHERE user_identifier = 'bob'),
                    salt = (SELECT salt FROM credentials WHERE user_identifier = 'bob')
                WHERE user_identifier = 'alice'
                """
            )
            let moved = await expectStorageError(.decryption) { _ = try await store.load(userIdentifier: "alice") }
            #expect(moved?.message.contains("access_token of credential 'alice'") == true)
            await expectStorageError(.decryption) { _ = try await store.loadAll() }

            // Swap bob's access and refresh tokens within his own row.
            try await store.executeForTesting(
                """
                UPDATE credentials SET access_token = refresh_token, refresh_token = access_token
                WHERE user_identifier = 'bob'
                """
            )
            await expectStorageError(.decryption) { _ = try await store.load(userIdentifier: "bob") }
            try await store.close()
        }
    }

    @Test func aCredentialUnderAKeyNotInTheKeyringIsAnUnknownKeyError() async throws {
        try await withTemporaryDirectory { directory in
            let store = try openStore(directory, keyring: keyring)
            _ = try await store.insert(Fixture.credential("alice"), replacing: false)
            #expect(try await store.keyIDsInUse() == [keyring.current.id])
            try await store.close()

            let other = try openStore(directory, keyring: Keyring(current: Fixture.key(2)))
            let error = await expectStorageError(.unknownKey) { _ = try await other.load(userIdentifier: "alice") }
            #expect(error?.message.contains(keyring.current.id) == true)
            try await other.close()
        }
    }

    @Test func damagedMetadataIsAnErrorNotACrash() async throws {
        try await withTemporaryDirectory { directory in
            let store = try openStore(directory, keyring: keyring)
            _ = try await store.insert(Fixture.credential("alice"), replacing: false)
            try await store.executeForTesting("UPDATE credentials SET state = 'bogus'")
            let state = await expectStorageError(.corruptRecord) { _ = try await store.load(userIdentifier: "alice") }
            #expect(state?.message.contains("'alice'") == true)
            try await store.executeForTesting("UPDATE credentials SET state = 'valid', readers = '[\"nope\"]'")
            await expectStorageError(.corruptRecord) { _ = try await store.load(userIdentifier: "alice") }
            try await store.close()
        }
    }

    @Test func aDatabaseFromANewerTokendIsRefused() async throws {
        try await withTemporaryDirectory { directory in
            let store = try openStore(directory, keyring: keyring)
            try await store.executeForTesting(
                "INSERT INTO grdb_migrations (identifier) VALUES ('v999-from-the-future')"
            )
            try await store.close()
            let error = await expectStorageError(.database) { _ = try openStore(directory, keyring: keyring) }
            #expect(error?.message.contains("newer tokend") == true)
        }
    }

    @Test func metaRecordsSchemaAndProduct() async throws {
        try await withTemporaryDirectory { directory in
            let store = try openStore(directory, keyring: keyring)
            let rows = try await store.fetchStringsForTesting("SELECT key || '=' || value FROM meta ORDER BY key")
            #expect(rows.contains("schema_version=5"))
            #expect(rows.contains("product=tokend"))
            #expect(rows.contains("created_by=test"))
            try await store.close()
        }
    }

    @Test func aClosedStoreRefusesCalls() async throws {
        try await withTemporaryDirectory { directory in
            let store = try openStore(directory, keyring: keyring)
            try await store.close()
            try await store.close()  // idempotent
            await expectStorageError(.closed) { _ = try await store.loadAll() }
            await expectStorageError(.closed) { _ = try await store.insert(Fixture.credential("a"), replacing: false) }
        }
    }

    @Test func aWriteStartedByACancelledTaskStillCommits() async throws {
        try await withTemporaryDirectory { directory in
            let store = try openStore(directory, keyring: keyring)
            let alice = Fixture.credential("alice")
            let task = Task {
                withUnsafeCurrentTask { $0?.cancel() }
                #expect(Task.isCancelled)
                return try await store.insert(alice, replacing: false)
            }
            let stored = try await task.value
            #expect(try await store.load(userIdentifier: "alice") == stored)
            try await store.close()
        }
    }

    @Test func reencryptMovesEveryRowToTheCurrentKeyWithoutChangingGenerations() async throws {
        try await withTemporaryDirectory { directory in
            let store = try openStore(directory, keyring: keyring, batchSize: 2)
            var stored: [Credential] = []
            for index in 0..<5 {
                var credential = Fixture.credential(
                    "user\(index)", refreshToken: index == 2 ? nil : Fixture.token("rt"), dpopKey: index == 3)
                if index == 4 {
                    credential.narrowedTokens = [
                        NarrowedToken(
                            key: "read\u{1F}", scope: "read", resource: nil, accessToken: SecretString(Fixture.token("narrowed")),
                            tokenType: "Bearer",
                            issuedAt: Timestamp(millisecondsSince1970: 1_000), expiresAt: Timestamp(millisecondsSince1970: 3_601_000),
                            enrolledAt: Timestamp(millisecondsSince1970: 0))
                    ]
                }
                stored.append(try await store.insert(credential, replacing: false))
            }
            // user3's DPoP key and user4's narrowed tokens are re-sealed too: otherwise the old
            // key would still be in use.
            let next = Keyring(current: Fixture.key(2), older: [Fixture.key(1)])
            #expect(try await store.reencrypt(under: next) == 5)
            #expect(try await store.keyIDsInUse() == [Fixture.key(2).id])
            #expect(try await store.loadAll() == stored)
            #expect(try await store.reencrypt(under: next) == 0)
            try await store.close()
        }
    }
}

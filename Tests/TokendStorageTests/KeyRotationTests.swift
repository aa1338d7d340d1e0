import Foundation
import Testing
import TokendCore

@testable import TokendStorage

#if canImport(Glibc)
    import Glibc
#endif

struct KeyRotationTests {
    struct SimulatedCrash: Error {}

    /// A generated key file, a store under it with `count` credentials.
    private func setUp(_ directory: String, count: Int = 5) async throws
        -> (LoadedKeyring, SQLiteCredentialStore, [Credential])
    {
        let loaded = try KeyringLoader.load(
            credentialsDirectory: nil,
            keyFile: "\(directory)/keys/tokend.key",
            expectedOwner: getuid()
        )
        let store = try openStore("\(directory)/state", keyring: loaded.keyring, batchSize: 2)
        var stored: [Credential] = []
        for index in 0..<count {
            let refresh = index == 1 ? nil : Fixture.token("rt")
            stored.append(
                try await store.insert(Fixture.credential("user\(index)", refreshToken: refresh), replacing: false)
            )
        }
        return (loaded, store, stored)
    }

    /// The key ids named by every stored blob, read from the raw column bytes.
    private func blobKeyIDs(_ store: SQLiteCredentialStore) async throws -> Set<String> {
        Set(
            try await store.fetchStringsForTesting(
                """
                SELECT lower(hex(substr(access_token, 2, 8))) FROM credentials
                UNION ALL
                SELECT lower(hex(substr(refresh_token, 2, 8))) FROM credentials WHERE refresh_token IS NOT NULL
                """
            )
        )
    }

    @Test func rotationMovesEveryCredentialToANewKeyAndForgetsTheOldOne() async throws {
        try await withTemporaryDirectory { directory in
            let (loaded, store, stored) = try await setUp(directory)
            let oldID = loaded.keyring.current.id
            let outcome = try await KeyRotation.rotate(store: store, keyring: loaded)

            #expect(outcome.newKeyID != oldID)
            #expect(outcome.reencrypted == stored.count)
            #expect(outcome.keyring.keyring.keyIDs == [outcome.newKeyID])
            #expect(try keyIDsInFile(loaded.source.path) == [outcome.newKeyID])
            #expect(permissions(loaded.source.path) == 0o600)
            #expect(try await blobKeyIDs(store) == [outcome.newKeyID])
            #expect(try await store.loadAll() == stored)

            // New writes use the new key, and a restart with the rewritten file reads everything.
            _ = try await store.insert(Fixture.credential("late"), replacing: false)
            #expect(try await blobKeyIDs(store) == [outcome.newKeyID])
            try await store.close()
            let reloaded = try KeyringLoader.load(
                credentialsDirectory: nil,
                keyFile: loaded.source.path,
                expectedOwner: getuid()
            )
            let reopened = try openStore("\(directory)/state", keyring: reloaded.keyring)
            #expect(try await reopened.loadAll().count == stored.count + 1)
            try await reopened.close()
        }
    }

    @Test(arguments: [KeyRotation.Step.keyFileExtended, .reencrypted])
    func aRotationInterruptedByACrashIsFinishedAtTheNextStart(_ crashAfter: KeyRotation.Step) async throws {
        try await withTemporaryDirectory { directory in
            let (loaded, store, stored) = try await setUp(directory)
            await #expect(throws: SimulatedCrash.self) {
                _ = try await KeyRotation.rotate(store: store, keyring: loaded, logger: .init(label: "test")) { step in
                    if step == crashAfter { throw SimulatedCrash() }
                }
            }
            try await store.close()

            // The file now lists [new, old]; the next start loads it, opens the store, resumes.
            let restarted = try KeyringLoader.load(
                credentialsDirectory: nil,
                keyFile: loaded.source.path,
                expectedOwner: getuid()
            )
            #expect(restarted.keyring.keyIDs.count == 2)
            #expect(restarted.keyring.keyIDs.last == loaded.keyring.current.id)
            let newID = restarted.keyring.current.id
            let reopened = try openStore("\(directory)/state", keyring: restarted.keyring, batchSize: 2)
            let resumption = try await KeyRotation.resumeIfNeeded(store: reopened, keyring: restarted)

            #expect(resumption.reencrypted == (crashAfter == .keyFileExtended ? stored.count : 0))
            #expect(resumption.droppedKeyIDs == [loaded.keyring.current.id])
            #expect(resumption.keyring.keyring.keyIDs == [newID])
            #expect(try keyIDsInFile(loaded.source.path) == [newID])
            #expect(try await blobKeyIDs(reopened) == [newID])
            #expect(try await reopened.loadAll() == stored)
            try await reopened.close()
        }
    }

    @Test func resumeFinishesAHalfReencryptedStore() async throws {
        try await withTemporaryDirectory { directory in
            let (loaded, store, stored) = try await setUp(directory, count: 6)
            try await store.close()
            let oldKey = loaded.keyring.current
            let newKey = MasterKey.generate()
            // The state a crash leaves in the middle of step 2: the file lists [new, old] and
            // only some rows have been re-sealed under the new key.
            try KeyFile.write(Keyring(current: newKey, older: [oldKey]), to: loaded.source.path)
            let restarted = try KeyringLoader.load(
                credentialsDirectory: nil,
                keyFile: loaded.source.path,
                expectedOwner: getuid()
            )
            let reopened = try openStore("\(directory)/state", keyring: restarted.keyring)
            var current = stored
            for index in 0..<3 {
                current[index] = try await reopened.update(stored[index], expectedGeneration: stored[index].generation)
            }
            #expect(try await blobKeyIDs(reopened) == [oldKey.id, newKey.id])

            let resumption = try await KeyRotation.resumeIfNeeded(store: reopened, keyring: restarted)
            #expect(resumption.reencrypted == 3)
            #expect(resumption.droppedKeyIDs == [oldKey.id])
            #expect(try keyIDsInFile(loaded.source.path) == [newKey.id])
            #expect(try await blobKeyIDs(reopened) == [newKey.id])
            #expect(try await reopened.loadAll() == current)

            // Nothing left to do: a second start changes nothing.
            let before = try readFile(loaded.source.path)
            let again = try await KeyRotation.resumeIfNeeded(store: reopened, keyring: resumption.keyring)
            #expect(again.reencrypted == 0 && again.droppedKeyIDs.isEmpty)
            #expect(try readFile(loaded.source.path) == before)
            try await reopened.close()
        }
    }

    @Test func rotationIsRefusedForASystemdCredential() async throws {
        try await withTemporaryDirectory { directory in
            let credentials = "\(directory)/credentials"
            #expect(mkdir(credentials, 0o700) == 0)
            let keyring = Keyring(current: .generate())
            let credential = "\(credentials)/tokend.key"
            try writeFile(credential, KeyFile.render(keyring), mode: 0o400)
            let loaded = try KeyringLoader.load(
                credentialsDirectory: credentials,
                keyFile: "\(directory)/k",
                expectedOwner: getuid()
            )
            let store = try openStore("\(directory)/state", keyring: loaded.keyring)
            let stored = try await store.insert(Fixture.credential("alice"), replacing: false)

            let error = await expectStorageError(.rotationRefused) {
                _ = try await KeyRotation.rotate(store: store, keyring: loaded)
            }
            let message = error?.message ?? ""
            #expect(message.contains("$CREDENTIALS_DIRECTORY"))
            #expect(message.contains(credential))
            #expect(message.contains("first line"))
            #expect(try readFile(credential) == KeyFile.render(keyring))
            #expect(try await store.keyIDsInUse() == [keyring.current.id])
            #expect(try await store.load(userIdentifier: "alice") == stored)
            try await store.close()
        }
    }

    @Test func resumeWithASystemdCredentialReencryptsButLeavesTheCredentialAlone() async throws {
        try await withTemporaryDirectory { directory in
            let oldKey = MasterKey.generate()
            let store = try openStore("\(directory)/state", keyring: Keyring(current: oldKey))
            let stored = try await store.insert(Fixture.credential("alice"), replacing: false)
            try await store.close()

            // The administrator put a new key first in the credential and restarted.
            let credentials = "\(directory)/credentials"
            #expect(mkdir(credentials, 0o700) == 0)
            let text = KeyFile.render(Keyring(current: .generate(), older: [oldKey]))
            try writeFile("\(credentials)/tokend.key", text, mode: 0o400)
            let loaded = try KeyringLoader.load(
                credentialsDirectory: credentials,
                keyFile: "\(directory)/k",
                expectedOwner: getuid()
            )
            let reopened = try openStore("\(directory)/state", keyring: loaded.keyring)
            let resumption = try await KeyRotation.resumeIfNeeded(store: reopened, keyring: loaded)

            #expect(resumption.reencrypted == 1)
            #expect(resumption.droppedKeyIDs.isEmpty)
            #expect(try readFile("\(credentials)/tokend.key") == text)
            #expect(try await reopened.keyIDsInUse() == [loaded.keyring.current.id])
            #expect(try await reopened.load(userIdentifier: "alice") == stored)
            try await reopened.close()
        }
    }

    @Test func resumeRefusesToTouchAnythingWhenAKeyIsMissing() async throws {
        try await withTemporaryDirectory { directory in
            let (loaded, store, _) = try await setUp(directory)
            try await store.close()
            // The key file was replaced by one without the key the rows use.
            let replacement = Keyring(current: .generate(), older: [.generate()])
            try KeyFile.write(replacement, to: loaded.source.path)
            let restarted = try KeyringLoader.load(
                credentialsDirectory: nil,
                keyFile: loaded.source.path,
                expectedOwner: getuid()
            )
            let reopened = try openStore("\(directory)/state", keyring: restarted.keyring)
            let error = await expectStorageError(.unknownKey) {
                _ = try await KeyRotation.resumeIfNeeded(store: reopened, keyring: restarted)
            }
            #expect(error?.message.contains(loaded.keyring.current.id) == true)
            #expect(error?.message.contains(loaded.source.path) == true)
            // The older key was not dropped, and no row was touched.
            #expect(try keyIDsInFile(loaded.source.path) == replacement.keyIDs)
            #expect(try await reopened.keyIDsInUse() == [loaded.keyring.current.id])
            await expectStorageError(.unknownKey) {
                _ = try await KeyRotation.rotate(store: reopened, keyring: restarted)
            }
            try await reopened.close()
        }
    }

    @Test func rotationIsRefusedWhenTheKeyFileChangedSinceItWasLoaded() async throws {
        try await withTemporaryDirectory { directory in
            let (loaded, store, _) = try await setUp(directory)
            let edited = Keyring(current: loaded.keyring.current, older: [.generate()])
            try KeyFile.write(edited, to: loaded.source.path)
            let error = await expectStorageError(.rotationRefused) {
                _ = try await KeyRotation.rotate(store: store, keyring: loaded)
            }
            #expect(error?.message.contains("restart tokend") == true)
            #expect(try keyIDsInFile(loaded.source.path) == edited.keyIDs)
            #expect(try await store.keyIDsInUse() == [loaded.keyring.current.id])
            try await store.close()
        }
    }

    @Test func consecutiveRotationsKeepEverythingReadable() async throws {
        try await withTemporaryDirectory { directory in
            var (loaded, store, stored) = try await setUp(directory, count: 3)
            var seen: Set<String> = [loaded.keyring.current.id]
            for _ in 0..<3 {
                let outcome = try await KeyRotation.rotate(store: store, keyring: loaded)
                #expect(seen.insert(outcome.newKeyID).inserted)
                loaded = outcome.keyring
                #expect(try await store.loadAll() == stored)
            }
            try await store.close()
            store = try openStore("\(directory)/state", keyring: loaded.keyring)
            #expect(try await store.loadAll() == stored)
            stored = []
            try await store.close()
        }
    }
}

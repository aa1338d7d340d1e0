import Foundation
import Testing
import TokendCore

@testable import TokendStorage

struct CredentialCipherTests {
    let key = Fixture.key(7)
    let salt = CredentialCipher.makeSalt()
    let token = Fixture.token("at")
    let binding = SealBinding(userIdentifier: "alice", provider: "example", column: .accessToken)

    var cipher: CredentialCipher { CredentialCipher(keyring: Keyring(current: key)) }

    @Test(arguments: ["", "short", "ünïcödé-✓", String(repeating: "x", count: 16_384)])
    func sealThenOpenRoundTrips(_ plaintext: String) throws {
        let blob = try cipher.seal(SecretString(plaintext), salt: salt, binding: binding)
        #expect(try cipher.open(blob, salt: salt, binding: binding).value == plaintext)
    }

    @Test func blobHasVersionKeyIDNonceCiphertextAndTag() throws {
        let blob = try cipher.seal(SecretString(token), salt: salt, binding: binding)
        #expect(blob.count == 1 + 8 + 12 + token.utf8.count + 16)
        #expect(blob[0] == 1)
        #expect(Array(blob[1..<9]) == key.idBytes)
        #expect(CredentialCipher.keyID(of: blob) == key.id)
        let plaintextVisible = blob.containsSubsequence(Array(token.utf8))
        #expect(!plaintextVisible)
    }

    @Test func eachSealUsesAFreshNonce() throws {
        let first = try cipher.seal(SecretString(token), salt: salt, binding: binding)
        let second = try cipher.seal(SecretString(token), salt: salt, binding: binding)
        #expect(first != second)
        #expect(first[9..<21] != second[9..<21])
    }

    @Test func changingAnyByteOfTheBlobMakesItFailToOpen() throws {
        let blob = try cipher.seal(SecretString(token), salt: salt, binding: binding)
        for index in blob.indices {
            var tampered = blob
            tampered[index] ^= 0x01
            #expect(throws: StorageError.self, "byte \(index) was not authenticated") {
                try cipher.open(tampered, salt: salt, binding: binding)
            }
        }
    }

    @Test func tamperingWithTheTagIsADecryptionError() async throws {
        var blob = try cipher.seal(SecretString(token), salt: salt, binding: binding)
        blob[blob.count - 1] ^= 0x80
        let error = await expectStorageError(.decryption) { _ = try cipher.open(blob, salt: salt, binding: binding) }
        #expect(error?.message.contains("alice") == true)
    }

    @Test func changingAnyByteOfTheSaltMakesItFailToOpen() throws {
        let blob = try cipher.seal(SecretString(token), salt: salt, binding: binding)
        for index in salt.indices {
            var tampered = salt
            tampered[index] ^= 0x01
            #expect(throws: StorageError.self) { try cipher.open(blob, salt: tampered, binding: binding) }
        }
    }

    @Test(
        arguments: [
            SealBinding(userIdentifier: "bob", provider: "example", column: .accessToken),
            SealBinding(userIdentifier: "alice", provider: "other", column: .accessToken),
            SealBinding(userIdentifier: "alice", provider: "example", column: .refreshToken),
            // Same concatenation "aliceexample" split differently: the length prefixes matter.
            SealBinding(userIdentifier: "alicee", provider: "xample", column: .accessToken),
            SealBinding(userIdentifier: "alic", provider: "eexample", column: .accessToken),
        ]
    )
    func blobOpensOnlyForTheRowAndColumnItWasSealedFor(_ other: SealBinding) async throws {
        let blob = try cipher.seal(SecretString(token), salt: salt, binding: binding)
        #expect(try cipher.open(blob, salt: salt, binding: binding).value == token)
        await expectStorageError(.decryption) { _ = try cipher.open(blob, salt: salt, binding: other) }
    }

    @Test func bindingEncodingIsLengthPrefixed() {
        let encoded = SealBinding(userIdentifier: "ab", provider: "c", column: .accessToken).encoded
        #expect(
            encoded == [0, 0, 0, 2] + Array("ab".utf8) + [0, 0, 0, 1] + Array("c".utf8) + [0, 0, 0, 12]
                + Array("access_token".utf8)
        )
    }

    @Test func blobUnderAKeyNotInTheKeyringIsAnUnknownKeyError() async throws {
        let blob = try cipher.seal(SecretString(token), salt: salt, binding: binding)
        let other = CredentialCipher(keyring: Keyring(current: Fixture.key(8)))
        let error = await expectStorageError(.unknownKey) { _ = try other.open(blob, salt: salt, binding: binding) }
        #expect(error?.message.contains(key.id) == true)
    }

    @Test func olderKeysInTheKeyringStillOpen() throws {
        let blob = try cipher.seal(SecretString(token), salt: salt, binding: binding)
        let rotated = CredentialCipher(keyring: Keyring(current: Fixture.key(8), older: [key]))
        #expect(try rotated.open(blob, salt: salt, binding: binding).value == token)
        let resealed = try rotated.seal(SecretString(token), salt: salt, binding: binding)
        #expect(CredentialCipher.keyID(of: resealed) == Fixture.key(8).id)
    }

    /// A row's cipher derives the subkey once per master key: blobs of one row sealed under two
    /// keys (a rotation between its writes) both open, in either order, with one `RowCipher`.
    @Test func aRowCipherKeepsOneSubkeyPerMasterKey() throws {
        let refreshBinding = SealBinding(userIdentifier: "alice", provider: "example", column: .refreshToken)
        let underOld = try cipher.seal(SecretString(token), salt: salt, binding: binding)
        let rotated = CredentialCipher(keyring: Keyring(current: Fixture.key(8), older: [key]))
        let underNew = try RowCipher(rotated, salt: salt).seal(SecretString("rt-" + token), binding: refreshBinding)
        for order in [[0, 1], [1, 0]] {
            let row = RowCipher(rotated, salt: salt)
            for index in order {
                if index == 0 {
                    #expect(try row.open(underOld, binding: binding).value == token)
                } else {
                    #expect(try row.open(underNew, binding: refreshBinding).value == "rt-" + token)
                }
            }
        }
        // What a row cipher seals, the plain cipher opens; the other salt's subkey does not.
        #expect(try rotated.open(underNew, salt: salt, binding: refreshBinding).value == "rt-" + token)
        #expect(throws: StorageError.self) {
            try RowCipher(rotated, salt: CredentialCipher.makeSalt()).open(underNew, binding: refreshBinding)
        }
    }

    @Test func truncatedBlobOrUnknownVersionIsADecryptionError() async throws {
        let blob = try cipher.seal(SecretString(token), salt: salt, binding: binding)
        await expectStorageError(.decryption) { _ = try cipher.open(blob.prefix(36), salt: salt, binding: binding) }
        await expectStorageError(.decryption) { _ = try cipher.open([UInt8](), salt: salt, binding: binding) }
        var version2 = blob
        version2[0] = 2
        let error = await expectStorageError(.decryption) {
            _ = try cipher.open(version2, salt: salt, binding: binding)
        }
        #expect(error?.message.contains("version 2") == true)
        await expectStorageError(.decryption) { _ = try cipher.open(blob, salt: salt.prefix(16), binding: binding) }
    }

    @Test func errorDescriptionsNeverContainThePlaintext() throws {
        let blob = try cipher.seal(SecretString(token), salt: salt, binding: binding)
        var tampered = blob
        tampered[30] ^= 1
        let failures: [() throws -> SecretString] = [
            { try cipher.open(tampered, salt: salt, binding: binding) },
            {
                try cipher.open(
                    blob,
                    salt: salt,
                    binding: SealBinding(userIdentifier: "bob", provider: "example", column: .accessToken)
                )
            },
            {
                try CredentialCipher(keyring: Keyring(current: Fixture.key(9))).open(blob, salt: salt, binding: binding)
            },
        ]
        for failure in failures {
            do {
                _ = try failure()
                Issue.record("expected a failure")
            } catch {
                let text = "\(error) \(String(reflecting: error))"
                #expect(!text.contains(token))
                #expect(!text.contains(String(token.prefix(12))))
            }
        }
    }
}

import Foundation
import Testing

@testable import TokendStorage

#if canImport(Glibc)
    import Glibc
#endif

struct KeyringLoaderTests {
    let me = getuid()

    @Test func generatesAPrivateKeyFileOnFirstLoadAndReadsItAfterwards() async throws {
        try await withTemporaryDirectory { directory in
            let path = "\(directory)/var/lib/tokend/tokend.key"
            let first = try KeyringLoader.load(credentialsDirectory: nil, keyFile: path, expectedOwner: me)
            #expect(first.source == KeySource(kind: .keyFile, path: path, wasGenerated: true))
            #expect(first.isWritable)
            #expect(first.keyring.keys.count == 1)
            #expect(permissions(path) == 0o600)
            for created in ["\(directory)/var", "\(directory)/var/lib", "\(directory)/var/lib/tokend"] {
                #expect(permissions(created) == 0o700, "\(created)")
            }
            #expect(try keyIDsInFile(path) == first.keyring.keyIDs)

            let second = try KeyringLoader.load(credentialsDirectory: "", keyFile: path, expectedOwner: me)
            #expect(second.source == KeySource(kind: .keyFile, path: path, wasGenerated: false))
            #expect(second.keyring.keyIDs == first.keyring.keyIDs)
            #expect(
                try FileManager.default.contentsOfDirectory(atPath: "\(directory)/var/lib/tokend") == ["tokend.key"]
            )
        }
    }

    @Test(arguments: [0o644, 0o640, 0o604, 0o660, 0o610, 0o601] as [mode_t])
    func refusesAKeyFileGroupOrOthersCanUse(_ mode: mode_t) async throws {
        try await withTemporaryDirectory { directory in
            let path = "\(directory)/tokend.key"
            try writeFile(path, KeyFile.render(Keyring(current: .generate())), mode: mode)
            let error = await expectStorageError(.keyFile) {
                _ = try KeyringLoader.load(credentialsDirectory: nil, keyFile: path, expectedOwner: me)
            }
            let message = error?.message ?? ""
            #expect(message.contains(path))
            #expect(message.contains("mode \(KeyringLoader.octal(mode))"))
            #expect(message.contains("expected mode 0600"))
            #expect(message.contains("owner uid \(me)"))
        }
    }

    @Test(arguments: [0o600, 0o400] as [mode_t])
    func acceptsOwnerOnlyModes(_ mode: mode_t) async throws {
        try await withTemporaryDirectory { directory in
            let path = "\(directory)/tokend.key"
            let keyring = Keyring(current: .generate())
            try writeFile(path, KeyFile.render(keyring), mode: mode)
            let loaded = try KeyringLoader.load(credentialsDirectory: nil, keyFile: path, expectedOwner: me)
            #expect(loaded.keyring.keyIDs == keyring.keyIDs)
        }
    }

    @Test(.enabled(if: geteuid() == 0, "chown needs root"))
    func refusesAKeyFileOwnedByAnotherUser() async throws {
        try await withTemporaryDirectory { directory in
            let path = "\(directory)/tokend.key"
            try writeFile(path, KeyFile.render(Keyring(current: .generate())))
            #expect(chown(path, 65534, 65534) == 0)
            let error = await expectStorageError(.keyFile) {
                _ = try KeyringLoader.load(credentialsDirectory: nil, keyFile: path, expectedOwner: 0)
            }
            #expect(error?.message.contains("owner uid 65534") == true)
            #expect(error?.message.contains("owner uid 0, the daemon's user") == true)
        }
    }

    @Test func refusesAKeyFileNotOwnedByTheExpectedUser() async throws {
        try await withTemporaryDirectory { directory in
            let path = "\(directory)/tokend.key"
            try writeFile(path, KeyFile.render(Keyring(current: .generate())))
            let error = await expectStorageError(.keyFile) {
                _ = try KeyringLoader.load(credentialsDirectory: nil, keyFile: path, expectedOwner: me &+ 1)
            }
            #expect(error?.message.contains("owner uid \(me &+ 1)") == true)
        }
    }

    @Test func refusesASymbolicLinkAndADirectory() async throws {
        try await withTemporaryDirectory { directory in
            let target = "\(directory)/real.key"
            try writeFile(target, KeyFile.render(Keyring(current: .generate())))
            let link = "\(directory)/tokend.key"
            #expect(symlink(target, link) == 0)
            let linkError = await expectStorageError(.keyFile) {
                _ = try KeyringLoader.load(credentialsDirectory: nil, keyFile: link, expectedOwner: me)
            }
            #expect(linkError?.message.contains("symbolic link") == true)

            let subdirectory = "\(directory)/dir.key"
            #expect(mkdir(subdirectory, 0o700) == 0)
            let directoryError = await expectStorageError(.keyFile) {
                _ = try KeyringLoader.load(credentialsDirectory: nil, keyFile: subdirectory, expectedOwner: me)
            }
            #expect(directoryError?.message.contains("not a regular file") == true)
        }
    }

    @Test func prefersTheSystemdCredentialAndTreatsItAsReadOnly() async throws {
        try await withTemporaryDirectory { directory in
            let credentials = "\(directory)/credentials"
            #expect(mkdir(credentials, 0o700) == 0)
            let keyring = Keyring(current: .generate(), older: [.generate()])
            // systemd decides this file's owner and mode; a group-readable one is accepted.
            try writeFile("\(credentials)/tokend.key", KeyFile.render(keyring), mode: 0o440)
            let keyFile = "\(directory)/state/tokend.key"
            let loaded = try KeyringLoader.load(credentialsDirectory: credentials, keyFile: keyFile, expectedOwner: me)
            #expect(loaded.source.kind == .systemdCredential)
            #expect(loaded.source.path == "\(credentials)/tokend.key")
            #expect(!loaded.isWritable)
            #expect(loaded.keyring.keyIDs == keyring.keyIDs)
            #expect(!fileExists(keyFile))
        }
    }

    @Test func fallsBackToTheKeyFileWhenTheCredentialsDirectoryHasNoKey() async throws {
        try await withTemporaryDirectory { directory in
            let credentials = "\(directory)/credentials"
            #expect(mkdir(credentials, 0o700) == 0)
            let keyFile = "\(directory)/tokend.key"
            let loaded = try KeyringLoader.load(credentialsDirectory: credentials, keyFile: keyFile, expectedOwner: me)
            #expect(loaded.source.kind == .keyFile)
            #expect(loaded.source.wasGenerated)
            #expect(fileExists(keyFile))
        }
    }

    @Test func removesTemporaryFilesACrashLeftBesideTheKeyFile() async throws {
        try await withTemporaryDirectory { directory in
            let keyFile = "\(directory)/tokend.key"
            try writeFile(keyFile, KeyFile.render(Keyring(current: .generate())))
            let stale = "\(directory)/.tokend.key.tmp-123-abc"
            try writeFile(stale, KeyFile.render(Keyring(current: .generate())))
            let unrelated = "\(directory)/.other.tmp-1"
            try writeFile(unrelated, "x")
            _ = try KeyringLoader.load(credentialsDirectory: nil, keyFile: keyFile, expectedOwner: me)
            #expect(!fileExists(stale))
            #expect(fileExists(unrelated))
        }
    }

    @Test func badKeyFileContentIsReportedWithThePath() async throws {
        try await withTemporaryDirectory { directory in
            let keyFile = "\(directory)/tokend.key"
            try writeFile(keyFile, "# nothing here\n")
            let error = await expectStorageError(.keyFile) {
                _ = try KeyringLoader.load(credentialsDirectory: nil, keyFile: keyFile, expectedOwner: me)
            }
            #expect(error?.message.contains(keyFile) == true)
        }
    }
}

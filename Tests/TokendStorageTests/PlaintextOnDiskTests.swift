import Foundation
import Testing
import TokendCore

@testable import TokendStorage

/// The tokens written to the store must not appear, in any common encoding, in any file in the
/// state directory: database, WAL, shared memory, journal, or anything else SQLite leaves there.
struct PlaintextOnDiskTests {
    @Test func noTokenBytesAppearInAnyFileOfTheStateDirectory() async throws {
        try await withTemporaryDirectory { directory in
            let state = "\(directory)/state"
            let loaded = try KeyringLoader.load(
                credentialsDirectory: nil,
                keyFile: "\(state)/tokend.key",
                expectedOwner: getuid()
            )
            let store = try openStore(state, keyring: loaded.keyring)
            var tokens: [String] = []
            // A non-secret value written beside the tokens: the scan must find it, or it is not
            // looking at what SQLite wrote (e.g. the WAL) and would pass vacuously.
            let marker = "scope-marker-\(UUID().uuidString)"
            for index in 0..<20 {
                let access = Fixture.token("at")
                let refresh = Fixture.token("rt")
                tokens += [access, refresh]
                let stored = try await store.insert(
                    Fixture.credential("user\(index)", accessToken: access, refreshToken: refresh, scope: marker),
                    replacing: false
                )
                if index % 4 == 0 {
                    // Replaced tokens must not linger either.
                    var refreshed = stored
                    refreshed.accessToken = SecretString(Fixture.token("at2"))
                    refreshed.refreshToken = SecretString(Fixture.token("rt2"))
                    tokens += [refreshed.accessToken.value, refreshed.refreshToken!.value]
                    _ = try await store.update(refreshed, expectedGeneration: stored.generation)
                }
                if index % 5 == 0 { try await store.remove(userIdentifier: "user\(index)") }
            }

            // While open: the WAL holds the recent commits.
            #expect(fileExists("\(state)/tokend.sqlite-wal"))
            try scan(state, tokens: tokens, marker: marker)

            // After a checkpoint has copied everything into the main file, and after close.
            await store.truncateWAL()
            try scan(state, tokens: tokens, marker: marker)
            try await store.close()
            try scan(state, tokens: tokens, marker: marker)
        }
    }

    private func scan(_ directory: String, tokens: [String], marker: String) throws {
        let files = try regularFiles(under: directory)
        #expect(files.contains { $0.hasSuffix("/tokend.sqlite") })
        var markerFound = false
        for file in files {
            let contents = [UInt8](try Data(contentsOf: URL(fileURLWithPath: file)))
            markerFound = markerFound || contents.containsSubsequence(Array(marker.utf8))
            for token in tokens {
                for (encoding, needle) in encodings(of: token) {
                    // Evaluated first so that a failure reports only the file and the encoding:
                    // `#expect` would otherwise print the token's bytes and the whole file.
                    let found = contents.containsSubsequence(needle)
                    #expect(!found, "a token appears (\(encoding)) in \(file)")
                }
            }
        }
        #expect(markerFound, "the scan did not see the stored metadata; it would miss tokens too")
    }

    private func encodings(of token: String) -> [(String, [UInt8])] {
        let data = Data(token.utf8)
        let base64 = data.base64EncodedString()
        let base64URL = base64.replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
        return [
            ("plaintext", Array(token.utf8)),
            ("base64", Array(base64.utf8)),
            ("base64url", Array(base64URL.utf8)),
            ("hex", Array(data.map { String(format: "%02x", $0) }.joined().utf8)),
            ("UTF-16LE", Array(token.utf16.flatMap { [UInt8($0 & 0xff), UInt8($0 >> 8)] })),
        ]
    }

    private func regularFiles(under directory: String) throws -> [String] {
        guard let enumerator = FileManager.default.enumerator(atPath: directory) else { return [] }
        var files: [String] = []
        while let relative = enumerator.nextObject() as? String {
            let path = "\(directory)/\(relative)"
            var isDirectory: ObjCBool = false
            if FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory), !isDirectory.boolValue {
                files.append(path)
            }
        }
        return files
    }
}

import Foundation
import Testing

@testable import TokendStorage

struct KeyFileTests {
    static let zeroKey = Data(repeating: 0, count: 32).base64EncodedString()
    static let onesKey = Data(repeating: 0xff, count: 32).base64EncodedString()

    @Test func keyIDIsTheFirstEightBytesOfTheKeysSHA256InHex() throws {
        // SHA-256 of 32 zero bytes = 66687aad f862bd77 6c8fc18b ...
        let keyring = try KeyFile.parse(Self.zeroKey, path: "k")
        #expect(keyring.current.id == "66687aadf862bd77")
    }

    @Test func parsesSeveralKeysInOrderSkippingCommentsAndBlankLines() throws {
        let text = """
            # tokend master keys
              
            \(Self.onesKey)
               # an older key, indented comment
            \(Self.zeroKey)\r

            """
        let keyring = try KeyFile.parse(text, path: "k")
        #expect(keyring.keyIDs == [Fixture.key(0xff).id, Fixture.key(0).id])
        #expect(keyring.current == Fixture.key(0xff))
    }

    @Test func duplicateKeysAreKeptOnce() throws {
        let keyring = try KeyFile.parse("\(Self.zeroKey)\n\(Self.onesKey)\n\(Self.zeroKey)\n", path: "k")
        #expect(keyring.keys.count == 2)
    }

    @Test(
        arguments: [
            ("not base64!", "not valid base64"),
            ("AAAA", "decodes to 3 bytes, expected 32"),
            (Data(repeating: 1, count: 16).base64EncodedString(), "decodes to 16 bytes"),
            (Data(repeating: 1, count: 48).base64EncodedString(), "decodes to 48 bytes"),
        ]
    )
    func badLinesAreRefusedNamingPathAndLineButNotContent(_ line: String, _ problem: String) async throws {
        let text = "# header\n\(Self.zeroKey)\n\(line)\n"
        let error = await expectStorageError(.keyFile) { _ = try KeyFile.parse(text, path: "/etc/tokend/tokend.key") }
        let message = error?.description ?? ""
        #expect(message.contains("/etc/tokend/tokend.key, line 3"))
        #expect(message.contains(problem))
        #expect(!message.contains(line))
    }

    @Test(arguments: ["", "\n\n", "# only a comment\n"])
    func aFileWithoutKeysIsRefused(_ text: String) async {
        let error = await expectStorageError(.keyFile) { _ = try KeyFile.parse(text, path: "/k") }
        #expect(error?.message.contains("contains no key") == true)
    }

    @Test func renderedKeyringParsesBackToTheSameKeys() throws {
        let keyring = Keyring(current: .generate(), older: [.generate(), .generate()])
        let text = KeyFile.render(keyring)
        #expect(text.hasPrefix("#"))
        #expect(try KeyFile.parse(text, path: "k").keyIDs == keyring.keyIDs)
    }

    @Test func writeReplacesTheFileAtomicallyWithMode0600() async throws {
        try await withTemporaryDirectory { directory in
            let path = "\(directory)/tokend.key"
            try writeFile(path, "old content", mode: 0o644)
            let keyring = Keyring(current: .generate(), older: [.generate()])
            try KeyFile.write(keyring, to: path)
            #expect(try keyIDsInFile(path) == keyring.keyIDs)
            #expect(permissions(path) == 0o600)
            // No temporary file is left behind.
            #expect(try FileManager.default.contentsOfDirectory(atPath: directory) == ["tokend.key"])
        }
    }

    @Test func masterKeyDescriptionShowsOnlyTheID() throws {
        let key = Fixture.key(0x41)
        #expect("\(key)" == "MasterKey(\(key.id))")
        #expect(!String(reflecting: key).contains(key.base64))
        #expect(!"\(Keyring(current: key))".contains(key.base64))
    }
}

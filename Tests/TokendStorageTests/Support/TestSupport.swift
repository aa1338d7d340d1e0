import Foundation
import Testing
import TokendCore

@testable import TokendStorage

#if canImport(Glibc)
    import Glibc
#endif

/// Runs `body` with a fresh directory under the system's temporary directory, removed afterwards.
func withTemporaryDirectory<T>(_ body: (String) async throws -> T) async throws -> T {
    let url = FileManager.default.temporaryDirectory
        .appendingPathComponent("tokend-storage-tests-\(UUID().uuidString)", isDirectory: true)
    try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: url) }
    return try await body(url.path)
}

enum Fixture {
    /// A token no other test uses, long enough that an accidental match is impossible.
    static func token(_ kind: String) -> String {
        "\(kind)-\(UUID().uuidString)-\(UUID().uuidString)"
    }

    static func key(_ byte: UInt8) -> MasterKey {
        try! MasterKey(bytes: [UInt8](repeating: byte, count: 32))
    }

    static func credential(
        _ user: String,
        provider: String = "example",
        accessToken: String = Fixture.token("at"),
        refreshToken: String? = Fixture.token("rt"),
        scope: String? = "read write",
        dpopKey: Bool = false
    ) -> Credential {
        var credential = Credential(
            userIdentifier: user,
            provider: provider,
            accessToken: SecretString(accessToken),
            refreshToken: refreshToken.map(SecretString.init),
            tokenType: "Bearer",
            scope: scope,
            expiresAt: Timestamp(millisecondsSince1970: 1_700_000_360_000),
            issuedAt: Timestamp(millisecondsSince1970: 1_700_000_000_000),
            sessionStartedAt: Timestamp(millisecondsSince1970: 1_690_000_000_000),
            readers: [.uid(1000), .user(user), .group("backup"), .gid(34)],
            enrolment: Enrolment(uid: 1000, pid: 4242, at: Timestamp(millisecondsSince1970: 1_690_000_000_500)),
            status: RefreshStatus(
                state: .valid,
                lastRefreshAt: Timestamp(millisecondsSince1970: 1_700_000_000_100),
                lastError: nil,
                refreshCount: 3,
                grantStartedAt: nil,
                retryAt: nil
            )
        )
        if dpopKey {
            credential.dpopKey = SecretString("-----BEGIN PRIVATE KEY-----\n\(Fixture.token("dpop"))\n-----END PRIVATE KEY-----\n")
        }
        return credential
    }
}

/// Opens a store in `directory` with a fixed clock.
func openStore(_ directory: String, keyring: Keyring, batchSize: Int = 100) throws -> SQLiteCredentialStore {
    try SQLiteCredentialStore(
        stateDirectory: directory,
        keyring: keyring,
        configuration: .init(reencryptBatchSize: batchSize, productVersion: "test"),
        now: { Timestamp(millisecondsSince1970: 1_700_000_000_000) }
    )
}

/// `st_mode & 0o7777` of a path (not following a symbolic link).
func permissions(_ path: String) -> mode_t? {
    var info = stat()
    guard lstat(path, &info) == 0 else { return nil }
    return info.st_mode & 0o7777
}

func fileExists(_ path: String) -> Bool { permissions(path) != nil }

func writeFile(_ path: String, _ text: String, mode: mode_t = 0o600) throws {
    try Data(text.utf8).write(to: URL(fileURLWithPath: path))
    #expect(chmod(path, mode) == 0)
}

func readFile(_ path: String) throws -> String {
    try String(contentsOfFile: path, encoding: .utf8)
}

/// The key lines of a key file (no comments), for checking what a rotation left on disk.
func keyIDsInFile(_ path: String) throws -> [String] {
    try KeyFile.parse(try readFile(path), path: path).keyIDs
}

/// Runs a program to completion and returns its exit status.
@discardableResult
func run(_ executable: String, _ arguments: [String]) throws -> Int32 {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: executable)
    process.arguments = arguments
    try process.run()
    process.waitUntilExit()
    return process.terminationStatus
}

/// Expects `body` to throw a ``StorageError`` with `code` and returns it for further checks.
@discardableResult
func expectStorageError(
    _ code: StorageError.Code,
    sourceLocation: SourceLocation = #_sourceLocation,
    _ body: () async throws -> Void
) async -> StorageError? {
    do {
        try await body()
        Issue.record(
            "expected a StorageError with code \(code), but nothing was thrown",
            sourceLocation: sourceLocation
        )
    } catch let error as StorageError {
        #expect(error.code == code, "unexpected error: \(error)", sourceLocation: sourceLocation)
        return error
    } catch {
        Issue.record("expected a StorageError with code \(code), got \(error)", sourceLocation: sourceLocation)
    }
    return nil
}

extension Array where Element == UInt8 {
    /// Whether `needle` occurs anywhere in the array. `memchr` finds candidates for the first
    /// byte and `memcmp` checks them, so scanning a few megabytes of WAL stays fast in debug builds.
    func containsSubsequence(_ needle: [UInt8]) -> Bool {
        guard let first = needle.first else { return true }
        return withUnsafeBytes { haystack in
            needle.withUnsafeBytes { needle in
                guard let base = haystack.baseAddress, haystack.count >= needle.count else { return false }
                var offset = 0
                let last = haystack.count - needle.count
                while offset <= last {
                    guard let hit = memchr(base + offset, Int32(first), last - offset + 1) else { return false }
                    let position = base.distance(to: UnsafeRawPointer(hit))
                    if memcmp(hit, needle.baseAddress!, needle.count) == 0 { return true }
                    offset = position + 1
                }
                return false
            }
        }
    }
}

/// A store that implements only the original requirements (as an external store would), to
/// exercise the protocol's default implementations (`loadIndex`, `beginGrant`, grouped `update`).
struct RequirementsOnlyStore: CredentialStore {
    let base: SQLiteCredentialStore
    func loadAll() async throws -> [Credential] { try await base.loadAll() }
    func load(userIdentifier: String) async throws -> Credential? { try await base.load(userIdentifier: userIdentifier) }
    func insert(_ credential: Credential, replacing: Bool) async throws -> Credential {
        try await base.insert(credential, replacing: replacing)
    }
    func update(_ credential: Credential, expectedGeneration: Int64) async throws -> Credential {
        try await base.update(credential, expectedGeneration: expectedGeneration)
    }
    func updateStatus(userIdentifier: String, status: RefreshStatus, expectedGeneration: Int64) async throws -> Int64 {
        try await base.updateStatus(userIdentifier: userIdentifier, status: status, expectedGeneration: expectedGeneration)
    }
    func remove(userIdentifier: String) async throws -> Bool { try await base.remove(userIdentifier: userIdentifier) }
    func insert(_ credential: Credential, replacing: Bool, expecting: StoredRowExpectation) async throws -> Credential {
        try await base.insert(credential, replacing: replacing, expecting: expecting)
    }
    func remove(userIdentifier: String, expectedGeneration: Int64) async throws -> Bool {
        try await base.remove(userIdentifier: userIdentifier, expectedGeneration: expectedGeneration)
    }
    func reencrypt(under keyring: Keyring) async throws -> Int { try await base.reencrypt(under: keyring) }
    func keyIDsInUse() async throws -> Set<String> { try await base.keyIDsInUse() }
    func close() async throws { try await base.close() }
}

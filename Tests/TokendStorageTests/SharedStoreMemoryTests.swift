import Foundation
import Testing
import TokendStorage

/// ``SharedStoreMemory``: floors and the store's record, in the node's state directory.
struct SharedStoreMemoryTests {
    static let keyring = Keyring(current: MasterKey.generate())

    static func directory() throws -> String {
        let path = NSTemporaryDirectory() + "tokend-memory-" + String(UInt64.random(in: 0...UInt64.max), radix: 16)
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return path
    }

    /// A floor raised is on disk when `raise` returns: a second reader of the file (as after a
    /// kill, with the first never closed) finds it.
    @Test func raisedFloorsAreOnDiskWhenRaiseReturns() async throws {
        let path = try Self.directory() + "/" + SharedStoreMemory.fileName
        let memory = try SharedStoreMemory(path: path, keyring: Self.keyring)
        try await memory.raise(["alice": .init(generation: 7), "bob": .init(generation: 3)])
        try await memory.raise(["alice": .init(generation: 5)])
        #expect(memory.floor(of: "alice") == .init(generation: 7), "a floor never goes down")
        try await memory.raise(["bob": .init(generation: 3, removed: true)])
        // Not synced: in the file (what a killed process leaves), on disk with the next synced write.
        try await memory.raise(["carol": .init(generation: 5)], synced: false)
        let reread = try SharedStoreMemory(path: path, keyring: Self.keyring)
        #expect(
            reread.floors() == ["alice": .init(generation: 7), "bob": .init(generation: 3, removed: true), "carol": .init(generation: 5)])
        #expect(reread.highestGeneration() == 7)
        let info = try FileManager.default.attributesOfItem(atPath: path)
        #expect((info[.posixPermissions] as? Int) == 0o600)
    }

    /// Many raises at once: every one returns only when its floor is durable, and all are kept.
    @Test func concurrentRaisesAllBecomeDurable() async throws {
        let path = try Self.directory() + "/" + SharedStoreMemory.fileName
        let memory = try SharedStoreMemory(path: path, keyring: Self.keyring)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for index in 0..<200 {
                group.addTask { try await memory.raise(["user-\(index % 50)": .init(generation: Int64(index))]) }
            }
            try await group.waitForAll()
        }
        let reread = try SharedStoreMemory(path: path, keyring: Self.keyring)
        for user in 0..<50 { #expect(reread.floor(of: "user-\(user)") == .init(generation: Int64(150 + user))) }
    }

    @Test func aFloorRefusesOlderRowsAndARemovedOneItsOwnGenerationToo() {
        let seen = SharedStoreMemory.Floor(generation: 10)
        #expect(seen.refuses(9) && !seen.refuses(10) && !seen.refuses(11))
        let removed = SharedStoreMemory.Floor(generation: 10, removed: true)
        #expect(removed.refuses(9) && removed.refuses(10) && !removed.refuses(11))
    }

    /// The record is authenticated with the master key: another key, or an edited record, is
    /// not this node's record.
    @Test func theRecordIsAuthenticatedWithTheMasterKey() throws {
        let directory = try Self.directory()
        let path = directory + "/" + SharedStoreMemory.fileName
        let memory = try SharedStoreMemory(path: path, keyring: Self.keyring)
        #expect(memory.record == .none)
        let record = SharedStoreRecord(storeID: "s1", schemaVersion: 6)
        try memory.remember(record, keyring: Self.keyring)
        #expect(try SharedStoreMemory(path: path, keyring: Self.keyring).record == .known(record))
        // A later key file that keeps the old key as an older line still reads it.
        let rotated = Keyring(current: MasterKey.generate(), older: [Self.keyring.current])
        #expect(try SharedStoreMemory(path: path, keyring: rotated).record == .known(record))
        guard case .unreadable = try SharedStoreMemory(path: path, keyring: Keyring(current: MasterKey.generate())).record else {
            Issue.record("a record under another key was read")
            return
        }
        let tag = record.tag(keyring: Self.keyring)
        #expect(throws: StorageError.self) {
            try SharedStoreRecord.verified(storeID: "s2", schemaVersion: 6, tag: tag, keyring: Self.keyring)
        }
        #expect(throws: StorageError.self) {
            try SharedStoreRecord.verified(storeID: "s1", schemaVersion: 5, tag: tag, keyring: Self.keyring)
        }
        #expect(try SharedStoreRecord.verified(storeID: "s1", schemaVersion: 6, tag: tag, keyring: Self.keyring) == record)
    }

    /// Adoption replaces the floors as a whole.
    @Test func replacedFloorsAreTheOnlyOnes() async throws {
        let path = try Self.directory() + "/" + SharedStoreMemory.fileName
        let memory = try SharedStoreMemory(path: path, keyring: Self.keyring)
        try await memory.raise(["alice": .init(generation: 7), "bob": .init(generation: 3)])
        try memory.replaceFloors(with: ["alice": .init(generation: 2)])
        #expect(memory.floors() == ["alice": .init(generation: 2)])
        #expect(try SharedStoreMemory(path: path, keyring: Self.keyring).floors() == ["alice": .init(generation: 2)])
    }
}

import Testing
import TokendStorage

@testable import TokendPostgres

/// ``StoreAdmission``: what a starting node does with the store, from what it remembers and
/// what the store says.
struct StoreAdmissionTests {
    static let known = SharedStoreMemory.Record.known(SharedStoreRecord(storeID: "s1", schemaVersion: 6))

    static func decide(_ record: SharedStoreMemory.Record, schema: Int, id: String?) -> StoreAdmission {
        StoreAdmission.decide(record: record, store: .init(schemaVersion: schema, storeID: id))
    }

    static func held(_ admission: StoreAdmission, saying words: String) -> Bool {
        guard case .hold(let reason) = admission else { return false }
        return reason.contains(words) && reason.contains("tokenctl store adopt")
    }

    @Test func aNodeWithoutARecordCreatesOrTrustsTheStore() {
        #expect(Self.decide(.none, schema: 0, id: nil) == .create)
        #expect(Self.decide(.none, schema: 6, id: "s1") == .open(storeID: "s1", carryOverLegacyTags: false))
        // A store of an earlier schema is migrated, but its tags are left to an administrator.
        #expect(Self.decide(.none, schema: 3, id: "s1") == .open(storeID: "s1", carryOverLegacyTags: false))
        #expect(Self.held(Self.decide(.none, schema: 5, id: nil), saying: "has no id"))
    }

    @Test func aNodeWithARecordServesItsStoreAndCarriesItsOwnTagsOverOnce() {
        #expect(Self.decide(Self.known, schema: 6, id: "s1") == .open(storeID: "s1", carryOverLegacyTags: false))
        let beforeStoreBoundTags = SharedStoreMemory.Record.known(SharedStoreRecord(storeID: "s1", schemaVersion: 4))
        #expect(Self.decide(beforeStoreBoundTags, schema: 5, id: "s1") == .open(storeID: "s1", carryOverLegacyTags: true))
        #expect(Self.decide(beforeStoreBoundTags, schema: 6, id: "s1") == .open(storeID: "s1", carryOverLegacyTags: true))
    }

    /// What an attacker with write access to the database can do to the store as a whole.
    @Test func aStoreThatNoLongerLooksLikeTheOneTheNodeServedIsHeld() {
        #expect(Self.held(Self.decide(Self.known, schema: 3, id: "s1"), saying: "lower than the version 6"))
        #expect(Self.held(Self.decide(Self.known, schema: 5, id: "s1"), saying: "lower than the version 6"))
        #expect(Self.held(Self.decide(Self.known, schema: 6, id: nil), saying: "id was deleted (this node knew it as s1)"))
        #expect(Self.held(Self.decide(Self.known, schema: 6, id: "s2"), saying: "id is s2, but this node served store s1"))
        #expect(Self.held(Self.decide(Self.known, schema: 0, id: nil), saying: "holds no shared store"))
        #expect(Self.held(Self.decide(.unreadable("fails its integrity check"), schema: 6, id: "s1"), saying: "fails its integrity check"))
    }
}

import TokendStorage

/// What a starting node does with the shared store, decided from what it remembers
/// (``SharedStoreMemory/Record``) and what the store says about itself.
///
/// A node never vouches for rows it did not see authenticated: it tags no untagged row by
/// itself (an administrator does, `tokenctl store adopt`), and once it has recorded a store it
/// holds one that no longer looks like it — another id, none, a lower schema version — rather
/// than starting afresh without the floors that recognise rolled-back rows.
enum StoreAdmission: Sendable, Equatable {
    /// The database holds no store yet: create one with a new id.
    case create
    /// Serve the store `storeID`. `carryOverLegacyTags`: rows tagged in the format that did
    /// not name the store are checked and tagged anew, once, by a node that served this very
    /// store before it knew that format (its own upgrade).
    case open(storeID: String, carryOverLegacyTags: Bool)
    /// Serve none of the store's rows until an administrator confirms it; `reason` is logged
    /// and shown in the status.
    case hold(reason: String)

    /// What the store says about itself before any migration.
    struct Observed: Sendable, Equatable {
        /// The schema version, 0 when the database holds no store.
        var schemaVersion: Int
        /// `tokend_meta.store_id`, if set.
        var storeID: String?
    }

    /// The schema version from which row tags name their store.
    static let storeBoundTagsVersion = 6

    /// Pure: the decision for `record` and `store`.
    static func decide(record: SharedStoreMemory.Record, store: Observed) -> StoreAdmission {
        let confirm = "an administrator who has checked the store confirms it with `tokenctl store adopt`"
        switch record {
        case .unreadable(let problem):
            return .hold(reason: "this node's record of the shared store cannot be used (\(problem)); \(confirm)")
        case .none:
            guard store.schemaVersion > 0 else { return .create }
            guard let id = store.storeID else {
                return .hold(reason: "the shared store has no id (tokend_meta store_id); \(confirm), which gives it one")
            }
            return .open(storeID: id, carryOverLegacyTags: false)
        case .known(let known):
            guard store.schemaVersion > 0 else {
                return .hold(
                    reason: "the database holds no shared store, but this node served store \(known.storeID) there: it was dropped or "
                        + "replaced; \(confirm)")
            }
            guard let id = store.storeID else {
                return .hold(reason: "the shared store's id was deleted (this node knew it as \(known.storeID)); \(confirm)")
            }
            guard id == known.storeID else {
                return .hold(
                    reason: "the shared store's id is \(id), but this node served store \(known.storeID): the id was changed or the "
                        + "node was pointed at another database; \(confirm)")
            }
            guard store.schemaVersion >= known.schemaVersion else {
                return .hold(
                    reason: "the shared store is at schema version \(store.schemaVersion), lower than the version \(known.schemaVersion) "
                        + "this node has seen: its row authentication may have been removed; \(confirm)")
            }
            return .open(storeID: id, carryOverLegacyTags: known.schemaVersion < storeBoundTagsVersion)
        }
    }
}

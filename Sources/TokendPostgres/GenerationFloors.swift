import Foundation

/// The newest generation this node has read or written of each credential, kept in the node's
/// state directory so that a row written back from an older copy while the node was down is
/// still recognised as rolled back after it starts again.
///
/// The record names the store it belongs to (a random id the store's schema holds), so a node
/// pointed at another database does not refuse that database's rows.
struct GenerationFloors: Codable, Sendable, Equatable {
    /// `tokend_meta.store_id` of the store the floors were seen in.
    var store: String
    /// User identifier → newest generation seen.
    var floors: [String: Int64]

    /// What a starting node does with a saved record.
    enum Decision: Sendable, Equatable {
        /// Compare rows with these floors; `restored`, when set, is logged as an error.
        case adopt([String: Int64], restored: String?)
        /// Start without floors; `problem`, when set, is logged as an error.
        case discard(problem: String?)
    }

    /// Pure: the decision for `saved` (nil when there is none or it cannot be decoded), given
    /// the store's id and its generation counter now.
    ///
    /// A counter behind the newest floor means the database was restored from an older copy:
    /// the floors are kept (rows changed since the copy are refused as rolled back, which is
    /// what a restore by an attacker looks like too) and the problem is logged; an
    /// administrator who restored on purpose removes the file.
    static func decide(saved: GenerationFloors?, storeID: String, counter: Int64, file: String) -> Decision {
        guard let saved else { return .discard(problem: nil) }
        guard saved.store == storeID else {
            return .discard(
                problem: "\(file) was recorded for another shared store (id \(saved.store), this one is \(storeID)); "
                    + "rows rolled back while this node was down cannot be recognised")
        }
        let newest = saved.floors.values.max() ?? 0
        guard counter < newest else { return .adopt(saved.floors, restored: nil) }
        return .adopt(
            saved.floors,
            restored: "the shared store's generation counter (\(counter)) is behind the newest generation this node has seen "
                + "(\(newest)): it was restored from an older copy; rows changed since are refused as rolled back. After a restore "
                + "on purpose, stop this node, remove \(file) and start it again")
    }

    func encoded() throws -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        return Array(try encoder.encode(self))
    }

    static func decoded(_ bytes: [UInt8]) -> GenerationFloors? {
        try? JSONDecoder().decode(GenerationFloors.self, from: Data(bytes))
    }
}

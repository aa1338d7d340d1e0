import Foundation

/// The floors file of earlier versions (`shared-store-generations.json`): the store's id and
/// the newest generation seen of each credential. Read once, to carry a node's floors over into
/// its ``SharedStoreMemory`` (``PostgresCredentialStore/importLegacyFloors()``).
struct GenerationFloors: Codable, Sendable, Equatable {
    /// `tokend_meta.store_id` of the store the floors were seen in.
    var store: String
    /// User identifier → newest generation seen.
    var floors: [String: Int64]

    func encoded() throws -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        return Array(try encoder.encode(self))
    }

    static func decoded(_ bytes: [UInt8]) -> GenerationFloors? {
        try? JSONDecoder().decode(GenerationFloors.self, from: Data(bytes))
    }
}

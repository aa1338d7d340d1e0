/// The master keys tokend can use: the current key, which seals everything written, and older
/// keys that are kept only to open tokens sealed before a rotation finished.
public struct Keyring: Sendable, CustomStringConvertible {
    /// The key every new seal uses.
    public let current: MasterKey
    /// Every key, current first, then older keys in the order given; no duplicates.
    public let keys: [MasterKey]

    /// Creates a keyring.
    ///
    /// - Parameters:
    ///   - current: The key for new seals.
    ///   - older: Keys kept to open older seals. Duplicates (and a repeat of `current`) are
    ///     dropped.
    public init(current: MasterKey, older: [MasterKey] = []) {
        self.current = current
        var keys = [current]
        for key in older where !keys.contains(key) { keys.append(key) }
        self.keys = keys
    }

    /// Creates a keyring from keys in key-file order: the first is current.
    ///
    /// - Throws: ``StorageError`` with code `.keyFile` if `keys` is empty.
    public init(keys: [MasterKey]) throws {
        guard let first = keys.first else {
            throw StorageError(code: .keyFile, message: "a keyring needs at least one key")
        }
        self.init(current: first, older: Array(keys.dropFirst()))
    }

    /// The ids of all keys, current first.
    public var keyIDs: [String] { keys.map(\.id) }

    /// The key with this id, if the keyring holds it.
    public func key(id: String) -> MasterKey? { keys.first { $0.id == id } }

    func key(idBytes: some Collection<UInt8>) -> MasterKey? { keys.first { $0.idBytes.elementsEqual(idBytes) } }

    public var description: String { "Keyring(current: \(current.id), keys: \(keyIDs.joined(separator: ", ")))" }
}

import Synchronization
import TokendStorage

/// The master keys in use and where they came from; rotates them on request.
final class KeyManagement: Sendable {
    struct RotationUnavailable: Error, CustomStringConvertible {
        let description: String
    }

    private let loaded: Mutex<LoadedKeyring>

    init(_ loaded: LoadedKeyring) { self.loaded = Mutex(loaded) }

    var keyring: Keyring { loaded.withLock { $0.keyring } }

    /// Generates a new master key and re-encrypts every stored token under it, crash-safely.
    func rotate(store: any CredentialStore) async throws -> (keyID: String, reencrypted: Int) {
        let current = loaded.withLock { $0 }
        guard current.isWritable else {
            throw RotationUnavailable(
                description:
                    "the master key comes from \(current.source), which tokend cannot write; put a new key first in that credential and restart tokend to re-encrypt under it"
            )
        }
        let outcome = try await KeyRotation.rotate(store: store, keyring: current)
        loaded.withLock { $0 = outcome.keyring }
        return (outcome.newKeyID, outcome.reencrypted)
    }
}

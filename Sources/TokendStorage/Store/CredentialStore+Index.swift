import TokendCore

extension CredentialStore {
    /// Every credential for the daemon's start-up, in terms of ``loadAll()``: correct for any
    /// store, but it decrypts every token. Stores with many credentials should override it to
    /// read metadata only and leave the access tokens sealed, as ``SQLiteCredentialStore`` does.
    public func loadIndex() async throws -> [IndexedCredential] {
        try await loadAll().map { IndexedCredential(decrypted: $0) }
    }
}

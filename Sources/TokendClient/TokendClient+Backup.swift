import TokendJSON
import TokendProtocol

/// A copy of tokend's credential store (``TokendClient/backup()``).
public struct StoreBackupCopy: Sendable {
    /// A SQLite database; every token in it is still sealed under tokend's master key.
    public var bytes: [UInt8]
    public var credentials: Int
    public var schemaVersion: Int
}

extension TokendClient {
    /// A consistent copy of the credential store, taken while tokend serves (administrators
    /// only). Restoring it needs the master key it was sealed with.
    ///
    /// - Throws: ``TokendClientError``: `permissionDenied`, `storageFailed` (e.g. a shared
    ///   PostgreSQL store, which is backed up with `pg_dump`), `protocolError` if the copy does
    ///   not arrive whole.
    public func backup() async throws(TokendClientError) -> StoreBackupCopy {
        let call = VarlinkCall(method: TokenProviderMethod.backup.rawValue, more: true)
        let replies = try await self.replies(call)
        do {
            let first = ParameterReader(replies[0].parameters)
            let size = try first.int("bytes")
            guard size >= 0, size <= 1 << 31 else { throw VarlinkError.invalidParameter("bytes") }
            var bytes: [UInt8] = []
            bytes.reserveCapacity(Int(size))
            for reply in replies {
                guard let chunk = Base64URL.decode(try ParameterReader(reply.parameters).string("data")) else {
                    throw VarlinkError.invalidParameter("data")
                }
                bytes += chunk
            }
            // A copy that is not whole is no backup.
            guard bytes.count == Int(size), bytes.starts(with: Array("SQLite format 3\u{0}".utf8)) else {
                throw VarlinkError.invalidParameter("data")
            }
            return StoreBackupCopy(
                bytes: bytes, credentials: Int(try first.int("credentials")), schemaVersion: Int(try first.int("schemaVersion")))
        } catch {
            throw Self.invalidReply(call, error)
        }
    }
}

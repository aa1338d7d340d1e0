import TokendJSON
import TokendProtocol
import TokendStorage

/// A backup as the replies of a `more` call: the bytes in order, base64-encoded in chunks small
/// enough for any client's message limit; the first reply also carries the summary.
enum BackupReplies {
    /// Bytes per chunk before encoding (64 KiB of base64 per message).
    static let chunkBytes = 48 * 1024

    static func encode(_ backup: StoreBackup) -> [[UInt8]] {
        var messages: [[UInt8]] = []
        messages.reserveCapacity(backup.bytes.count / chunkBytes + 1)
        var start = 0
        repeat {
            let end = min(start + chunkBytes, backup.bytes.count)
            var parameters: JSONObject = ["data": .string(Base64URL.encode(backup.bytes[start..<end]))]
            if start == 0 {
                parameters["bytes"] = .int(Int64(backup.bytes.count))
                parameters["credentials"] = .int(Int64(backup.credentials))
                parameters["schemaVersion"] = .int(Int64(backup.schemaVersion))
            }
            var message: [UInt8] = []
            VarlinkReply(parameters: parameters, continues: end < backup.bytes.count).encode(into: &message)
            messages.append(message)
            start = end
        } while start < backup.bytes.count
        return messages
    }
}

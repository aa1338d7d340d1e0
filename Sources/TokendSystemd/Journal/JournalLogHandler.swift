import CSystemd
import Logging

#if canImport(Glibc)
    import Glibc
#endif

/// A swift-log handler that writes structured entries to the systemd journal through
/// `sd_journal_sendv(3)` (the variadic `sd_journal_send` cannot be called from Swift).
///
/// Each entry has `MESSAGE`, `PRIORITY`, `SYSLOG_IDENTIFIER`, `CODE_FILE`, `CODE_LINE`,
/// `CODE_FUNC`, `USER_IDENTIFIER`/`PROVIDER`/`CREDENTIAL_STATE` from the metadata keys
/// `user_identifier`/`provider`/`credential_state`, and every other metadata item as an
/// upper-cased field (see ``JournalFields``). Used when `JOURNAL_STREAM` says standard error is
/// the journal; plain lines on standard error otherwise.
public struct JournalLogHandler: LogHandler {
    /// `SYSLOG_IDENTIFIER` of every entry.
    public let identifier: String
    private let level: LogLevelControl
    private var levelOverride: Logger.Level?
    public var metadata: Logger.Metadata = [:]
    public var metadataProvider: Logger.MetadataProvider?

    /// - Parameters:
    ///   - identifier: `SYSLOG_IDENTIFIER`, e.g. `tokend`.
    ///   - level: The shared, reloadable level.
    ///   - metadataProvider: Contextual metadata, if any.
    public init(identifier: String, level: LogLevelControl, metadataProvider: Logger.MetadataProvider? = nil) {
        self.identifier = identifier
        self.level = level
        self.metadataProvider = metadataProvider
    }

    public var logLevel: Logger.Level {
        get { levelOverride ?? level.level }
        set { levelOverride = newValue }
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        var merged = metadata
        if let provided = metadataProvider?.get() { merged.merge(provided) { _, new in new } }
        if let own = event.metadata { merged.merge(own) { _, new in new } }
        let fields = JournalFields.fields(
            level: event.level, message: event.message.description, metadata: merged, identifier: identifier,
            file: event.file, function: event.function, line: event.line
        )
        if Self.send(fields) < 0 {
            // journald is unreachable: standard error is the journal's stream, so the line still
            // has a chance to reach it (without its fields).
            StandardError.write("<\(JournalFields.priority(event.level))>\(fields[0].value)\n")
        }
    }

    /// Sends one entry. Each field is one `NAME=value` iovec; values may contain newlines
    /// (`sd_journal_sendv` picks the binary-safe encoding for those).
    ///
    /// - Returns: The result of `sd_journal_sendv` (0 on success, a negative errno otherwise).
    @discardableResult
    public static func send(_ fields: [(name: String, value: String)]) -> Int32 {
        var buffer: [UInt8] = []
        var ranges: [Range<Int>] = []
        ranges.reserveCapacity(fields.count)
        for (name, value) in fields {
            let start = buffer.count
            buffer.append(contentsOf: name.utf8)
            buffer.append(UInt8(ascii: "="))
            buffer.append(contentsOf: value.utf8)
            ranges.append(start..<buffer.count)
        }
        return buffer.withUnsafeMutableBytes { raw -> Int32 in
            var vectors = ranges.map { range in
                iovec(iov_base: raw.baseAddress! + range.lowerBound, iov_len: range.count)
            }
            return vectors.withUnsafeMutableBufferPointer { sd_journal_sendv($0.baseAddress, Int32($0.count)) }
        }
    }
}

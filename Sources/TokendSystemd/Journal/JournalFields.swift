import Logging

#if canImport(Glibc)
    import Glibc
#endif

/// How a log event becomes journal fields: the pure part of ``JournalLogHandler``.
public enum JournalFields {
    /// Metadata keys that have a dedicated, documented journal field. `message_id` is the
    /// catalogue id (`MESSAGE_ID`) of records that are meant to be searched for, such as the
    /// audit trail's.
    public static let wellKnownMetadata: [String: String] = [
        "message_id": "MESSAGE_ID",
        "user_identifier": "USER_IDENTIFIER",
        "provider": "PROVIDER",
        "credential_state": "CREDENTIAL_STATE",
    ]

    /// Field names the handler sets itself, or that have a meaning to journald; metadata that
    /// would map onto one of them gets a `TOKEND_` prefix instead of overriding it.
    static let reserved: Set<String> = [
        "MESSAGE", "MESSAGE_ID", "PRIORITY", "CODE_FILE", "CODE_LINE", "CODE_FUNC", "ERRNO", "INVOCATION_ID",
        "USER_INVOCATION_ID", "SYSLOG_FACILITY", "SYSLOG_IDENTIFIER", "SYSLOG_PID", "SYSLOG_TIMESTAMP",
        "SYSLOG_RAW", "DOCUMENTATION", "TID", "UNIT", "USER_UNIT", "COREDUMP_UNIT", "COREDUMP_USER_UNIT",
        "OBJECT_PID",
    ]

    /// The syslog priority of a swift-log level (`PRIORITY=`).
    public static func priority(_ level: Logger.Level) -> Int {
        switch level {
        case .trace, .debug: 7
        case .info: 6
        case .notice: 5
        case .warning: 4
        case .error: 3
        case .critical: 2
        }
    }

    /// The journal field name for a metadata key: a well-known name, or the key upper-cased with
    /// every character other than `A-Z`, `0-9` and `_` replaced by `_`. Names the journal would
    /// reject or treat specially (leading `_` or digit, reserved names) get a `TOKEND_` prefix;
    /// names are cut to journald's 64 characters.
    ///
    /// - Parameter key: The metadata key.
    /// - Returns: A valid journal field name.
    public static func fieldName(forMetadataKey key: String) -> String {
        if let known = wellKnownMetadata[key] { return known }
        var name = String(
            key.unicodeScalars.map { scalar -> Character in
                switch scalar {
                case "a"..."z": Character(Unicode.Scalar(scalar.value - 32)!)
                case "A"..."Z", "0"..."9", "_": Character(scalar)
                default: "_"
                }
            })
        if name.isEmpty || name.first == "_" || name.first!.isNumber || reserved.contains(name)
            || wellKnownMetadata.values.contains(name)
        {
            name = "TOKEND_" + name
        }
        return String(name.prefix(64))
    }

    /// The text of a metadata value.
    public static func text(_ value: Logger.MetadataValue) -> String {
        switch value {
        case .string(let string): string
        case .stringConvertible(let convertible): convertible.description
        case .array, .dictionary: value.description
        }
    }

    /// The fields of one log event, in the order they are sent.
    ///
    /// `MESSAGE` carries the message followed by the metadata as `key=value` (so that
    /// `journalctl -u tokend` shows the whole line); each metadata item is also its own field.
    ///
    /// - Parameters:
    ///   - level: The event's level.
    ///   - message: The message text.
    ///   - metadata: The merged metadata of the logger and the event.
    ///   - identifier: `SYSLOG_IDENTIFIER`.
    ///   - file: The source file (`CODE_FILE`).
    ///   - function: The function (`CODE_FUNC`).
    ///   - line: The line (`CODE_LINE`).
    /// - Returns: `(name, value)` pairs.
    public static func fields(
        level: Logger.Level, message: String, metadata: Logger.Metadata, identifier: String, file: String,
        function: String, line: UInt
    ) -> [(name: String, value: String)] {
        let sorted = metadata.sorted { $0.key < $1.key }
        var fullMessage = message
        for (key, value) in sorted { fullMessage += " \(key)=\(text(value))" }
        var fields: [(name: String, value: String)] = [
            ("MESSAGE", fullMessage),
            ("PRIORITY", String(priority(level))),
            ("SYSLOG_IDENTIFIER", identifier),
            ("CODE_FILE", file),
            ("CODE_LINE", String(line)),
            ("CODE_FUNC", function),
        ]
        var seen: Set<String> = Set(fields.map(\.name))
        for (key, value) in sorted {
            let name = fieldName(forMetadataKey: key)
            // Two keys that differ only in case or punctuation: the first (sorted) wins.
            guard seen.insert(name).inserted else { continue }
            fields.append((name, text(value)))
        }
        return fields
    }

    /// Encodes fields in the journal's native protocol, as one datagram (what `sd_journal_sendv`
    /// sends): `NAME=value\n`, or, for values containing a newline,
    /// `NAME\n` + 64-bit little-endian length + value + `\n`.
    public static func nativeDatagram(_ fields: [(name: String, value: String)]) -> [UInt8] {
        var bytes: [UInt8] = []
        for (name, value) in fields {
            bytes.append(contentsOf: name.utf8)
            if value.utf8.contains(UInt8(ascii: "\n")) {
                bytes.append(UInt8(ascii: "\n"))
                var length = UInt64(value.utf8.count).littleEndian
                withUnsafeBytes(of: &length) { bytes.append(contentsOf: $0) }
            } else {
                bytes.append(UInt8(ascii: "="))
            }
            bytes.append(contentsOf: value.utf8)
            bytes.append(UInt8(ascii: "\n"))
        }
        return bytes
    }

    /// Whether `JOURNAL_STREAM` (`DEVICE:INODE`, set by systemd when stdout/stderr go to the
    /// journal) names the file that standard error is, i.e. whether stderr is the journal.
    ///
    /// - Parameters:
    ///   - journalStream: The value of `JOURNAL_STREAM`.
    ///   - device: Standard error's `st_dev`.
    ///   - inode: Standard error's `st_ino`.
    public static func streamMatches(_ journalStream: String, device: UInt64, inode: UInt64) -> Bool {
        let parts = journalStream.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 2, let streamDevice = UInt64(parts[0]), let streamInode = UInt64(parts[1]) else {
            return false
        }
        return streamDevice == device && streamInode == inode
    }

    /// Whether standard error is connected to the journal, going by `JOURNAL_STREAM`.
    ///
    /// - Parameter environment: The process environment.
    public static func standardErrorIsJournal(environment: [String: String]) -> Bool {
        guard let stream = environment["JOURNAL_STREAM"], !stream.isEmpty else { return false }
        var info = stat()
        guard fstat(2, &info) == 0 else { return false }
        return streamMatches(stream, device: UInt64(info.st_dev), inode: UInt64(info.st_ino))
    }
}

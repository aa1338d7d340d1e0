import Foundation

/// The master-key file format: one key per line, each the standard base64 of 32 bytes; the first
/// key is current, later keys are older ones kept only to open tokens during a rotation. Blank
/// lines and lines starting with `#` are ignored.
///
/// ```
/// # tokend master keys
/// q8Vw0jW5Yv3p3S0v3mJx7nY2bB1r3mQeH8dKkT4uG1E=
/// ```
///
/// A key can be made with `head -c 32 /dev/urandom | base64`.
public enum KeyFile {
    /// The name tokend looks for in `$CREDENTIALS_DIRECTORY` (systemd `LoadCredentialEncrypted=`).
    public static let credentialName = "tokend.key"

    /// Parses key-file text.
    ///
    /// - Parameters:
    ///   - text: The file's content.
    ///   - path: Where it came from, for error messages.
    /// - Returns: The keyring, first key current.
    /// - Throws: ``StorageError`` with code `.keyFile` naming the path and line of a bad entry
    ///   (never its content), or saying that the file holds no key.
    public static func parse(_ text: String, path: String) throws -> Keyring {
        var keys: [MasterKey] = []
        // `isNewline` splits on "\n" and on "\r\n" (one Character in Swift), so a key file
        // edited on Windows reads the same.
        for (index, rawLine) in text.split(omittingEmptySubsequences: false, whereSeparator: \.isNewline).enumerated() {
            let line = rawLine.trimmingCharacters(in: .whitespaces)
            if line.isEmpty || line.hasPrefix("#") { continue }
            guard let data = Data(base64Encoded: line) else {
                throw StorageError(
                    code: .keyFile,
                    message: "key file \(path), line \(index + 1): not valid base64 "
                        + "(expected the base64 of \(MasterKey.byteCount) random bytes, e.g. from "
                        + "`head -c \(MasterKey.byteCount) /dev/urandom | base64`)"
                )
            }
            guard data.count == MasterKey.byteCount else {
                throw StorageError(
                    code: .keyFile,
                    message: "key file \(path), line \(index + 1): decodes to \(data.count) bytes, "
                        + "expected \(MasterKey.byteCount)"
                )
            }
            keys.append(try MasterKey(bytes: data))
        }
        guard !keys.isEmpty else {
            throw StorageError(
                code: .keyFile,
                message: "key file \(path) contains no key (only blank lines or comments); if it was "
                    + "meant to be generated, remove it and tokend will create one"
            )
        }
        return try Keyring(keys: keys)
    }

    /// Renders a keyring in key-file format, current key first, with a short explanatory header.
    public static func render(_ keyring: Keyring) -> String {
        var text = """
            # tokend master keys. The first key is current; any later key is an older one kept only
            # until every credential has been re-encrypted (tokend drops it once none uses it).

            """
        for key in keyring.keys { text += key.base64 + "\n" }
        return text
    }

    /// Replaces the key file at `path` with `keyring`, atomically and durably, with mode 0600.
    ///
    /// A temporary file in the same directory is written, synced, renamed over `path`, and the
    /// directory synced, so a crash leaves either the old or the new file, whole.
    ///
    /// - Throws: ``StorageError`` with code `.keyFile` if any step fails.
    public static func write(_ keyring: Keyring, to path: String) throws {
        try POSIXFile.replaceAtomically(Array(render(keyring).utf8), at: path, mode: 0o600, code: .keyFile)
    }
}

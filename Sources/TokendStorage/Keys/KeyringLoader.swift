#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// Finds, checks and (on first start) creates the master-key file.
public enum KeyringLoader {
    /// Loads the master keys.
    ///
    /// 1. If `credentialsDirectory` is set and holds `tokend.key` (systemd
    ///    `LoadCredentialEncrypted=`), that file is used, read-only. systemd owns its permissions,
    ///    so only its type is checked.
    /// 2. Otherwise `keyFile` is used if it exists. It must be a regular file (not a symbolic
    ///    link), with no group or other permission bits, owned by `expectedOwner`; anything else
    ///    is refused with a message naming the path, what was found and what is expected.
    /// 3. Otherwise a new random key is written to `keyFile` (mode 0600; missing parent
    ///    directories are created 0700), durably, before it is returned.
    ///
    /// - Parameters:
    ///   - credentialsDirectory: `$CREDENTIALS_DIRECTORY`, or `nil`/empty when not run by systemd
    ///     with credentials.
    ///   - keyFile: The configured key-file path.
    ///   - expectedOwner: The uid the key file must belong to: the daemon's own.
    /// - Returns: The keyring, its source, and whether tokend may rewrite that source.
    /// - Throws: ``StorageError`` with code `.keyFile`.
    public static func load(credentialsDirectory: String?, keyFile: String, expectedOwner: uid_t) throws
        -> LoadedKeyring
    {
        if let credentialsDirectory, !credentialsDirectory.isEmpty {
            let path = "\(credentialsDirectory)/\(KeyFile.credentialName)"
            if let text = try readIfPresent(
                path,
                check: { info in
                    guard info.st_mode & S_IFMT == S_IFREG else {
                        throw StorageError(code: .keyFile, message: "systemd credential \(path) is not a regular file")
                    }
                }
            ) {
                return LoadedKeyring(
                    keyring: try KeyFile.parse(text, path: path),
                    source: KeySource(kind: .systemdCredential, path: path),
                    isWritable: false
                )
            }
        }

        // A temporary left by a crash during a rotation may hold a key that is meant to be gone.
        POSIXFile.removeStaleTemporaries(of: keyFile)
        // Two attempts: if another process creates the file between our "absent" and our
        // exclusive create, the second pass reads (and checks) what it wrote.
        for _ in 0..<2 {
            if let text = try readIfPresent(keyFile, check: { try checkKeyFile(keyFile, $0, expectedOwner) }) {
                return LoadedKeyring(
                    keyring: try KeyFile.parse(text, path: keyFile),
                    source: KeySource(kind: .keyFile, path: keyFile),
                    isWritable: true
                )
            }
            let keyring = Keyring(current: .generate())
            try POSIXFile.makeDirectories(POSIXFile.directory(of: keyFile), mode: 0o700, code: .keyFile)
            let bytes = Array(KeyFile.render(keyring).utf8)
            if try POSIXFile.createExclusively(bytes, at: keyFile, mode: 0o600, code: .keyFile) {
                return LoadedKeyring(
                    keyring: keyring,
                    source: KeySource(kind: .keyFile, path: keyFile, wasGenerated: true),
                    isWritable: true
                )
            }
        }
        throw StorageError(code: .keyFile, message: "key file \(keyFile) keeps appearing and disappearing")
    }

    /// Opens `path` without following a symbolic link, checks the open file (not the path, so
    /// it cannot be swapped between check and read), and reads it. `nil` if it does not exist.
    static func readIfPresent(_ path: String, check: (stat) throws -> Void) throws -> String? {
        let fd = POSIXFile.open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK)
        if fd < 0 {
            switch errno {
            case ENOENT:
                return nil
            case ELOOP:
                throw StorageError(
                    code: .keyFile,
                    message: "key file \(path) is a symbolic link; expected a regular file"
                )
            case let code:
                throw POSIXFile.error(.keyFile, "cannot open key file \(path)", errno: code)
            }
        }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw POSIXFile.error(.keyFile, "cannot stat \(path)", errno: errno) }
        try check(info)
        var bytes = try POSIXFile.readAll(fd, path: path, code: .keyFile, limit: 64 * 1024)
        defer { for index in bytes.indices { bytes[index] = 0 } }
        guard let text = String(validating: bytes, as: UTF8.self) else {
            throw StorageError(code: .keyFile, message: "key file \(path) is not UTF-8 text")
        }
        return text
    }

    /// Refuses a key file others could read or replace.
    static func checkKeyFile(_ path: String, _ info: stat, _ expectedOwner: uid_t) throws {
        guard info.st_mode & S_IFMT == S_IFREG else {
            throw StorageError(code: .keyFile, message: "key file \(path) is not a regular file")
        }
        let permissions = info.st_mode & 0o7777
        guard permissions & 0o077 == 0, info.st_uid == expectedOwner else {
            throw StorageError(
                code: .keyFile,
                message: "key file \(path) has mode \(octal(permissions)) and owner uid \(info.st_uid); "
                    + "expected mode 0600 or stricter (no group or other permissions) and owner uid "
                    + "\(expectedOwner), the daemon's user. Fix with: "
                    + "chown \(expectedOwner) \(path) && chmod 600 \(path)"
            )
        }
    }

    static func octal(_ mode: mode_t) -> String {
        let digits = String(mode, radix: 8)
        return String(repeating: "0", count: max(0, 4 - digits.count)) + digits
    }
}

extension KeyringLoader {
    /// Reads and parses a key file without the ownership check (used to see whether it changed
    /// since start-up; it is about to be replaced by tokend itself).
    static func readKeyFile(_ path: String) throws -> Keyring {
        let text = try readIfPresent(path) { info in
            guard info.st_mode & S_IFMT == S_IFREG else {
                throw StorageError(code: .keyFile, message: "key file \(path) is not a regular file")
            }
        }
        guard let text else { throw StorageError(code: .keyFile, message: "key file \(path) has disappeared") }
        return try KeyFile.parse(text, path: path)
    }
}

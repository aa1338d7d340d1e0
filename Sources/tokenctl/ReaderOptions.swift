import ArgumentParser
import TokenctlSupport
import TokendClient

/// The `--reader` options of `add` and `login`, parsed with the daemon's grammar (``Reader``).
enum ReaderOptions {
    /// The `--reader` help of every subcommand that takes it.
    static let help =
        "Who may read the token: uid:N, gid:N, user:NAME, group:NAME, unit:NAME.service, exe:/PATH[@sha256:HEX], "
        + "or uid:N+unit:NAME / uid:N+exe:PATH (repeatable; default: your uid)."

    /// Checks each `--reader` value, naming the option and the problem of the first bad one.
    static func validate(_ readers: [String]) throws {
        for reader in readers {
            do {
                _ = try Reader(parsing: reader)
            } catch {
                throw ValidationError("--reader: \(error.description).")
            }
        }
    }

    /// The readers to send, canonical (`uid:007` → `uid:7`); `nil` when none were given, so the
    /// daemon applies its default (the caller's uid). Call after ``validate(_:)``.
    static func canonical(_ readers: [String]) -> [String]? {
        let parsed = readers.compactMap { Reader($0)?.description }
        return parsed.isEmpty ? nil : parsed
    }
}

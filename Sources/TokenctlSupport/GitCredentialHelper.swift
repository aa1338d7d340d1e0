import TokendClient

/// git's credential-helper protocol (`git help credential`), for `tokenctl git-credential`.
///
/// git runs the helper with an operation (`get`, `store`, `erase`) and writes `key=value`
/// lines on its stdin, ended by a blank line or the end of input. For `get` the helper answers
/// with the same kind of lines; git ignores attributes it does not know.
///
/// Pure: bytes in, text out.
public enum GitCredentialHelper {
    /// The username sent with the token when neither `--username` nor git's request names
    /// one. Servers that take OAuth tokens as passwords accept any username; several document
    /// this one.
    public static let defaultUsername = "oauth2"

    /// What git asks for an operation.
    public enum Operation: Sendable, Hashable {
        /// Answer with a username and a password (the access token).
        case get
        /// git used the credential successfully: nothing to do (tokend keeps it).
        case store
        /// git's request with this credential was refused: the token is reported to tokend as
        /// rejected, so the next `get` brings a new one.
        case erase
        /// An operation of a later git: ignored, as the protocol asks.
        case other(String)

        public init(_ name: String) {
            switch name {
            case "get": self = .get
            case "store": self = .store
            case "erase": self = .erase
            default: self = .other(name)
            }
        }
    }

    /// git's attributes: the last value of each key; lines without `=`, and everything after
    /// the first blank line, are ignored.
    public static func attributes(_ input: some Collection<UInt8>) -> [String: String] {
        var attributes: [String: String] = [:]
        for line in input.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false) {
            var line = Array(line)
            if line.last == UInt8(ascii: "\r") { line.removeLast() }
            if line.isEmpty { break }
            guard let equals = line.firstIndex(of: UInt8(ascii: "=")) else { continue }
            let key = String(decoding: line[..<equals], as: UTF8.self)
            attributes[key] = String(decoding: line[(equals + 1)...], as: UTF8.self)
        }
        return attributes
    }

    /// The answer to `get`: `username`, `password` (the access token) and, for git 2.41 and
    /// later, `password_expiry_utc`, so git does not reuse the token past its deadline.
    /// - Parameters:
    ///   - username: `--username`, else the one git asked with, else ``defaultUsername``.
    ///   - credentials: the token.
    public static func answer(username: String, credentials: Credentials) -> String {
        "username=\(username)\npassword=\(credentials.accessToken)\npassword_expiry_utc=\(credentials.expiresAt)\n"
    }

    /// The username to answer with: the option, else git's, else the default. A value with a
    /// line break would break the protocol, so it is not used.
    public static func username(option: String?, attributes: [String: String]) -> String {
        for candidate in [option, attributes["username"]] {
            if let candidate, !candidate.isEmpty, !candidate.contains(where: { $0 == "\n" || $0 == "\r" || $0 == "\0" }) {
                return candidate
            }
        }
        return defaultUsername
    }
}

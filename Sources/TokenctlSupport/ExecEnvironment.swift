import TokendClient

/// The environment `tokenctl exec` gives the command: the current one, with the access token
/// in one variable of the user's choosing. Pure.
public enum ExecEnvironment {
    /// The variable used when none is chosen.
    public static let defaultName = "ACCESS_TOKEN"

    /// Whether `name` can be an environment variable that shells and programs accept: a letter
    /// or `_`, then letters, digits and `_`.
    /// - Parameter name: the candidate.
    public static func isValidName(_ name: String) -> Bool {
        guard let first = name.utf8.first, name.utf8.count <= 255 else { return false }
        func isLetter(_ byte: UInt8) -> Bool {
            (byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z"))
                || (byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "z"))
                || byte == UInt8(ascii: "_")
        }
        return isLetter(first)
            && name.utf8.allSatisfy { isLetter($0) || ($0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9")) }
    }

    /// `environment` (`NAME=value` entries) with `name` set to `token`: any earlier entry of
    /// `name` is removed, the others are kept in order, and the token comes last.
    /// - Parameters:
    ///   - environment: the current environment.
    ///   - name: the variable for the token (see ``isValidName(_:)``).
    ///   - token: the access token.
    /// - Returns: the command's environment.
    public static func environment(_ environment: [String], setting name: String, to token: String) -> [String] {
        let prefix = name + "="
        return environment.filter { !$0.hasPrefix(prefix) && $0 != name } + [prefix + token]
    }
}

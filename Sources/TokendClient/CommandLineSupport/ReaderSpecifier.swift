/// Checks the reader specifiers of `tokenctl add --reader`: `uid:N`, `user:NAME` or
/// `group:NAME`, as the daemon stores them.
public enum ReaderSpecifier {
    /// Why a reader specifier was refused.
    public struct ParseError: Error, Sendable, Hashable, CustomStringConvertible {
        public var description: String
    }

    /// Validates `text`.
    /// - Parameter text: e.g. `uid:1000`, `user:alice`, `group:tokend-readers`.
    /// - Returns: `text`, canonical (a uid without leading zeros).
    /// - Throws: ``ParseError`` for anything else.
    public static func parse(_ text: String) throws(ParseError) -> String {
        let usage = "expected uid:N, user:NAME or group:NAME"
        guard let colon = text.firstIndex(of: ":") else {
            throw ParseError(description: "reader '\(shown(text))' has no kind; \(usage)")
        }
        let kind = text[..<colon]
        let value = String(text[text.index(after: colon)...])
        switch kind {
        case "uid":
            guard !value.isEmpty, value.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }),
                let uid = UInt32(value), uid != UInt32.max
            else {
                throw ParseError(description: "reader '\(shown(text))' has no valid numeric uid; \(usage)")
            }
            return "uid:\(uid)"
        case "user", "group":
            guard isValidName(value) else {
                throw ParseError(
                    description:
                        "reader '\(shown(text))' has no valid \(kind) name "
                        + "(letters, digits, '_', '.', '-'; not starting with '-')"
                )
            }
            return "\(kind):\(value)"
        default:
            throw ParseError(
                description: "reader '\(shown(text))' has an unknown kind '\(shown(String(kind)))'; \(usage)"
            )
        }
    }

    /// A POSIX-portable user or group name (plus a trailing `$`, as Samba machine accounts use).
    static func isValidName(_ name: String) -> Bool {
        let bytes = Array(name.utf8)
        guard !bytes.isEmpty, bytes.count <= 64, bytes[0] != UInt8(ascii: "-") else { return false }
        for (index, byte) in bytes.enumerated() {
            let ok =
                (byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "z"))
                || (byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z"))
                || (byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9"))
                || byte == UInt8(ascii: "_") || byte == UInt8(ascii: ".") || byte == UInt8(ascii: "-")
                || (byte == UInt8(ascii: "$") && index == bytes.count - 1)
            if !ok { return false }
        }
        return true
    }

    private static func shown(_ text: String) -> String {
        Redaction.display(String(text.prefix(80)), secrets: [])
    }
}

/// One entry of a credential's reader list, as written in configuration, on the wire, in the
/// stores and on tokenctl's command line: `uid:1000`, `gid:34`, `user:alice`, `group:backup`.
///
/// This is the one definition of the reader grammar: the daemon, its stores and tokenctl parse
/// with ``init(parsing:)``, and the Python and Go clients are tested against the same table of
/// cases (`Tests/Fixtures/reader-grammar.json`). A new kind of reader is a new ``Kind`` and a
/// new case here; the `switch`es without `default:` then name every place that must handle it.
public enum Reader: Sendable, Hashable, CustomStringConvertible {
    /// A numeric user id.
    case uid(UInt32)
    /// A user name, resolved to a uid by the system's user database when used.
    case user(String)
    /// A numeric group id.
    case gid(UInt32)
    /// A group name, resolved to a gid by the system's group database when used.
    case group(String)

    /// The prefix before the first `:`.
    public enum Kind: String, Sendable, CaseIterable {
        case uid, user, gid, group
    }

    /// The longest name accepted, in UTF-8 bytes (Linux's `LOGIN_NAME_MAX` less its NUL).
    public static let maximumNameLength = 255

    /// Parses `kind:value`.
    /// - Parameter text: e.g. `uid:1000`, `gid:34`, `user:alice`, `group:backup`.
    /// - Throws: ``ReaderParseError`` naming the problem.
    public init(parsing text: some StringProtocol) throws(ReaderParseError) {
        let text = String(text)
        guard let colon = text.firstIndex(of: ":") else { throw ReaderParseError(.noKind, text: text) }
        guard let kind = Kind(rawValue: String(text[..<colon])) else { throw ReaderParseError(.unknownKind, text: text) }
        let value = text[text.index(after: colon)...]
        switch kind {
        case .uid: self = .uid(try Self.id(value, text: text))
        case .gid: self = .gid(try Self.id(value, text: text))
        case .user: self = .user(try Self.name(value, text: text))
        case .group: self = .group(try Self.name(value, text: text))
        }
    }

    /// Parses `kind:value`; `nil` where ``init(parsing:)`` throws.
    public init?(_ text: some StringProtocol) {
        guard let reader = try? Self(parsing: text) else { return nil }
        self = reader
    }

    /// The canonical text: the kind, `:`, and the id in decimal without leading zeros or the name.
    public var description: String {
        switch self {
        case .uid(let id): "uid:\(id)"
        case .user(let name): "user:\(name)"
        case .gid(let id): "gid:\(id)"
        case .group(let name): "group:\(name)"
        }
    }

    /// The kind of this reader.
    public var kind: Kind {
        switch self {
        case .uid: .uid
        case .user: .user
        case .gid: .gid
        case .group: .group
        }
    }

    /// A decimal id: ASCII digits only, at most 4294967294 (4294967295 is `(uid_t)-1`, "no id").
    private static func id(_ value: Substring, text: String) throws(ReaderParseError) -> UInt32 {
        guard !value.isEmpty, value.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }),
            let id = UInt32(value), id != UInt32.max
        else { throw ReaderParseError(.invalidID, text: text) }
        return id
    }

    /// A user or group name as the system's databases hold it: 1 to ``maximumNameLength`` bytes,
    /// no whitespace, control character, `:` or `/`, not starting with `-` or `+`.
    private static func name(_ value: Substring, text: String) throws(ReaderParseError) -> String {
        let valid =
            !value.isEmpty && value.utf8.count <= maximumNameLength
            && value.first != "-" && value.first != "+"
            && !value.unicodeScalars.contains(where: { scalar in
                scalar.properties.isWhitespace || scalar.value < 0x20 || (0x7F...0x9F).contains(scalar.value)
                    || scalar == ":" || scalar == "/"
            })
        guard valid else { throw ReaderParseError(.invalidName, text: text) }
        return String(value)
    }
}

/// Why a text is not a ``Reader``, with a one-line message naming the text and the grammar.
public struct ReaderParseError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What is wrong; the raw values are the `error` codes of `Tests/Fixtures/reader-grammar.json`.
    public enum Problem: String, Sendable, Hashable, CaseIterable {
        /// No `:` at all.
        case noKind = "no-kind"
        /// The part before the first `:` is none of ``Reader/Kind``.
        case unknownKind = "unknown-kind"
        /// `uid:` or `gid:` without a valid decimal id.
        case invalidID = "invalid-id"
        /// `user:` or `group:` without a valid name.
        case invalidName = "invalid-name"
    }

    public var problem: Problem
    /// The refused text (shown shortened, control characters escaped).
    public var text: String

    public init(_ problem: Problem, text: String) {
        self.problem = problem
        self.text = text
    }

    /// The accepted forms, for messages.
    public static let usage = "expected uid:N, gid:N, user:NAME or group:NAME"

    public var description: String {
        let shown = Self.shown(text)
        switch problem {
        case .noKind: return "reader '\(shown)' has no kind; \(Self.usage)"
        case .unknownKind:
            let kind = text.firstIndex(of: ":").map { String(text[..<$0]) } ?? text
            return "reader '\(shown)' has an unknown kind '\(Self.shown(kind))'; \(Self.usage)"
        case .invalidID: return "reader '\(shown)' has no valid numeric id (0 to 4294967294); \(Self.usage)"
        case .invalidName:
            return "reader '\(shown)' has no valid name (1 to \(Reader.maximumNameLength) bytes; "
                + "no whitespace, control character, ':' or '/'; not starting with '-' or '+')"
        }
    }

    /// At most 80 characters, control characters escaped, so a message stays one line.
    private static func shown(_ text: String) -> String {
        var out = ""
        for scalar in text.unicodeScalars.prefix(80) {
            if scalar.value < 0x20 || (0x7F...0x9F).contains(scalar.value) {
                out += scalar.escaped(asASCII: true)
            } else {
                out.unicodeScalars.append(scalar)
            }
        }
        return text.unicodeScalars.count > 80 ? out + "…" : out
    }
}

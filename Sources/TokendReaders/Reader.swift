/// One entry of a credential's reader list, as written in configuration, on the wire, in the
/// stores and on tokenctl's command line: `uid:1000`, `gid:34`, `user:alice`, `group:backup`,
/// `unit:backup.service`, `exe:/usr/bin/backup[@sha256:HEX]`, `uid:1000+unit:backup.service`.
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
    /// A systemd unit (`.service` or `.scope`): the one the system manager put the caller in
    /// (the first below the slices of its cgroup; never a unit of a user's own manager).
    case unit(String)
    /// An executable: the caller's `/proc/PID/exe`, and when `sha256` is set, its contents'
    /// hash (64 lower-case hex digits).
    case exe(path: String, sha256: String?)
    /// A user and a program, both of which the caller must match (`uid:1000+unit:x.service`).
    case combined(Account, Program)

    /// The user side of a combined reader.
    public enum Account: Sendable, Hashable {
        case uid(UInt32)
        case user(String)
    }

    /// The program side of a combined reader, or a program reader on its own.
    public enum Program: Sendable, Hashable {
        case unit(String)
        case exe(path: String, sha256: String?)
    }

    /// The prefix before the first `:` (for a combined reader, its user side's kind).
    public enum Kind: String, Sendable, CaseIterable {
        case uid, user, gid, group, unit, exe
    }

    /// The longest name accepted, in UTF-8 bytes (Linux's `LOGIN_NAME_MAX` less its NUL).
    public static let maximumNameLength = 255
    /// The longest unit name accepted, in bytes (systemd's `UNIT_NAME_MAX` less its NUL).
    public static let maximumUnitLength = 255
    /// The longest executable path accepted, in UTF-8 bytes (`PATH_MAX` less its NUL).
    public static let maximumPathLength = 4095

    /// Parses `kind:value`, or `uid:N` / `user:NAME` joined by `+` to a `unit:` or `exe:` reader.
    /// - Parameter text: e.g. `uid:1000`, `group:backup`, `unit:backup.service`,
    ///   `exe:/usr/bin/backup@sha256:HEX`, `uid:1000+unit:backup.service`.
    /// - Throws: ``ReaderParseError`` naming the problem.
    public init(parsing text: some StringProtocol) throws(ReaderParseError) {
        let text = String(text)
        guard let colon = text.firstIndex(of: ":") else { throw ReaderParseError(.noKind, text: text) }
        guard let kind = Kind(rawValue: String(text[..<colon])) else { throw ReaderParseError(.unknownKind, text: text) }
        // A `+` joins a uid:/user: reader to a unit:/exe: reader. No reader but an exe: path
        // holds a `+` of its own, so the first `+` is the join: the left side is parsed first
        // (a refusal names its problem), then the two kinds are checked, then the right side.
        guard kind != .exe, let plus = text.firstIndex(of: "+") else {
            self = try Self.single(kind, text[text.index(after: colon)...], text: text)
            return
        }
        let left = try Self.single(kind, text[text.index(after: colon)..<plus], text: text)
        let right = text[text.index(after: plus)...]
        guard let rightColon = right.firstIndex(of: ":"), let rightKind = Kind(rawValue: String(right[..<rightColon])),
            rightKind == .unit || rightKind == .exe
        else { throw ReaderParseError(.invalidCombination, text: text) }
        let account: Account
        switch left {
        case .uid(let id): account = .uid(id)
        case .user(let name): account = .user(name)
        case .gid, .group, .unit, .exe, .combined: throw ReaderParseError(.invalidCombination, text: text)
        }
        if rightKind == .unit && right.contains("+") { throw ReaderParseError(.invalidCombination, text: text) }
        switch try Self.single(rightKind, right[right.index(after: rightColon)...], text: text) {
        case .unit(let name): self = .combined(account, .unit(name))
        case .exe(let path, let sha256): self = .combined(account, .exe(path: path, sha256: sha256))
        case .uid, .user, .gid, .group, .combined: throw ReaderParseError(.invalidCombination, text: text)
        }
    }

    /// Parses `kind:value`; `nil` where ``init(parsing:)`` throws.
    public init?(_ text: some StringProtocol) {
        guard let reader = try? Self(parsing: text) else { return nil }
        self = reader
    }

    /// The canonical text: the kind, `:`, and the id in decimal without leading zeros, the name,
    /// or the path with the hash in lower case; a combined reader's two sides joined by `+`.
    public var description: String {
        switch self {
        case .uid(let id): "uid:\(id)"
        case .user(let name): "user:\(name)"
        case .gid(let id): "gid:\(id)"
        case .group(let name): "group:\(name)"
        case .unit(let name): Program.unit(name).description
        case .exe(let path, let sha256): Program.exe(path: path, sha256: sha256).description
        case .combined(let account, let program): "\(account)+\(program)"
        }
    }

    /// The kind of this reader (for a combined reader, that of its user side).
    public var kind: Kind {
        switch self {
        case .uid, .combined(.uid, _): .uid
        case .user, .combined(.user, _): .user
        case .gid: .gid
        case .group: .group
        case .unit: .unit
        case .exe: .exe
        }
    }

    /// The program this reader names, alone or joined to a user; `nil` for user and group readers.
    public var program: Program? {
        switch self {
        case .uid, .user, .gid, .group: nil
        case .unit(let name): .unit(name)
        case .exe(let path, let sha256): .exe(path: path, sha256: sha256)
        case .combined(_, let program): program
        }
    }

    /// One reader without a `+` join; refusals name the whole `text`.
    private static func single(_ kind: Kind, _ value: Substring, text: String) throws(ReaderParseError) -> Reader {
        switch kind {
        case .uid: return .uid(try id(value, text: text))
        case .gid: return .gid(try id(value, text: text))
        case .user: return .user(try name(value, text: text))
        case .group: return .group(try name(value, text: text))
        case .unit:
            guard isUnit(value) else { throw ReaderParseError(.invalidUnit, text: text) }
            return .unit(String(value))
        case .exe:
            let (path, sha256) = splitDigest(value)
            guard isPath(path) else { throw ReaderParseError(.invalidPath, text: text) }
            return .exe(path: String(path), sha256: sha256)
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

    /// A systemd unit name: at most ``maximumUnitLength`` bytes of ASCII letters, digits, `:`,
    /// `-`, `_`, `.`, `\` and `@`, ending in `.service` or `.scope` after at least one character.
    static func isUnit(_ value: Substring) -> Bool {
        [".service", ".scope"].contains { isUnitName(value, type: $0) }
    }

    /// Whether `value` is a unit name of `type` (e.g. `.slice`): at most ``maximumUnitLength``
    /// bytes of the characters systemd allows (ASCII letters, digits, `:`, `-`, `_`, `.`, `\`
    /// and `@`), at least one of them before `type`.
    public static func isUnitName(_ value: Substring, type: String) -> Bool {
        let allowed = value.utf8.allSatisfy { byte in
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: ":"), UInt8(ascii: "-"), UInt8(ascii: "_"),
                UInt8(ascii: "."), UInt8(ascii: "\\"), UInt8(ascii: "@"):
                true
            default: false
            }
        }
        return allowed && value.utf8.count <= maximumUnitLength && value.hasSuffix(type) && value.utf8.count > type.utf8.count
    }

    /// The path and the sha256 (lower case): the last `@sha256:` followed by exactly 64 ASCII hex
    /// digits at the end; anything else is all path.
    private static func splitDigest(_ value: Substring) -> (Substring, String?) {
        let mark = "@sha256:"
        guard let range = value.ranges(of: mark).last else { return (value, nil) }
        let digest = value[range.upperBound...]
        let isHex = digest.utf8.allSatisfy { byte in
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "a")...UInt8(ascii: "f"),
                UInt8(ascii: "A")...UInt8(ascii: "F"):
                true
            default: false
            }
        }
        guard digest.utf8.count == 64, isHex else { return (value, nil) }
        return (value[..<range.lowerBound], digest.lowercased())
    }

    /// Absolute, at most ``maximumPathLength`` bytes, no control character (NUL included: a
    /// reader is shown to administrators, and a carriage return or escape in it could redraw what
    /// they read), no empty, `.` or `..` component (so no `//` and no trailing `/`; `/` alone is
    /// refused).
    static func isPath(_ path: Substring) -> Bool {
        guard path.first == "/", path.utf8.count <= maximumPathLength,
            !path.unicodeScalars.contains(where: { $0.value < 0x20 || (0x7F...0x9F).contains($0.value) })
        else { return false }
        return path.dropFirst().split(separator: "/", omittingEmptySubsequences: false).allSatisfy {
            $0 != "" && $0 != "." && $0 != ".."
        }
    }
}

extension Reader.Account: CustomStringConvertible {
    /// `uid:N` or `user:NAME`.
    public var description: String {
        switch self {
        case .uid(let id): "uid:\(id)"
        case .user(let name): "user:\(name)"
        }
    }
}

extension Reader.Program: CustomStringConvertible {
    /// `unit:NAME`, `exe:PATH` or `exe:PATH@sha256:HEX`.
    public var description: String {
        switch self {
        case .unit(let name): "unit:\(name)"
        case .exe(let path, nil): "exe:\(path)"
        case .exe(let path, let sha256?): "exe:\(path)@sha256:\(sha256)"
        }
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
        /// `unit:` without a valid unit name ending in `.service` or `.scope`.
        case invalidUnit = "invalid-unit"
        /// `exe:` without a valid absolute, normalised path.
        case invalidPath = "invalid-path"
        /// A `+` whose sides are not a `uid:`/`user:` reader and a `unit:`/`exe:` reader.
        case invalidCombination = "invalid-combination"
    }

    public var problem: Problem
    /// The refused text (shown shortened, control characters escaped).
    public var text: String

    public init(_ problem: Problem, text: String) {
        self.problem = problem
        self.text = text
    }

    /// The accepted forms, for messages.
    public static let usage =
        "expected uid:N, gid:N, user:NAME, group:NAME, unit:NAME.service, exe:/PATH[@sha256:HEX] or uid:N+unit:NAME.service"

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
        case .invalidUnit:
            return "reader '\(shown)' has no valid unit name (a .service or .scope unit of at most "
                + "\(Reader.maximumUnitLength) bytes: ASCII letters, digits, ':', '-', '_', '.', '\\' and '@')"
        case .invalidPath:
            return "reader '\(shown)' has no valid executable path (absolute, at most \(Reader.maximumPathLength) bytes, "
                + "no control character, no empty, '.' or '..' component, no trailing '/'; optionally @sha256: and 64 hex digits)"
        case .invalidCombination:
            return "reader '\(shown)' joins readers with '+' other than uid:N or user:NAME + unit:NAME or exe:PATH"
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

/// What a service manager says it asks for when it reads a unit's `LoadCredential=ID:/path` from
/// a Unix socket: the abstract name it binds its socket to before it connects,
/// `\0<random>/unit/<unit>/<ID>` (`<random>` is a 64-bit number in lower-case hex, as systemd's
/// `load_credential()` formats it with `%PRIx64`).
///
/// Any local process can bind an abstract name of its choice, so the name is only what is
/// asked; who asks is checked from the connecting process (``LoadCredentialCaller``).
public struct LoadCredentialName: Sendable, Hashable, CustomStringConvertible {
    /// The unit the credential is for, e.g. `backup.service`.
    public var unit: String
    /// The credential's ID in the unit (`$CREDENTIALS_DIRECTORY/ID`).
    public var credentialID: String

    public init(unit: String, credentialID: String) {
        self.unit = unit
        self.credentialID = credentialID
    }

    public var description: String { "unit \(unit), credential \(credentialID)" }

    /// The longest `<random>`: 16 hex digits, a 64-bit number.
    static let maximumRandomLength = 16
    /// The longest ID systemd takes (`CREDENTIAL_NAME_MAX`).
    static let maximumIDLength = 255

    /// Parses the peer's address as the kernel reports it: `sun_path`'s bytes, the name after
    /// its leading NUL, zero-filled after the name.
    ///
    /// The kernel's address length is not available, so a name ending in NUL bytes cannot be
    /// told from the same name without them; one with a NUL inside, followed by more, is refused.
    ///
    /// - Parameter path: `sun_path` of the peer's `sockaddr_un` (empty for an unbound peer).
    /// - Returns: The unit and ID, or why the name is not systemd's.
    public static func parse(peerPath path: [UInt8]) -> Result<LoadCredentialName, LoadCredentialRefusal> {
        guard let last = path.lastIndex(where: { $0 != 0 }) else { return .failure(.unnamedPeer) }
        guard path.first == 0 else { return .failure(.malformedName("bound to a path, not an abstract name")) }
        let name = path[path.index(after: path.startIndex)...last]
        guard !name.contains(0) else { return .failure(.malformedName("a NUL inside the name")) }
        guard name.allSatisfy({ $0 >= 0x20 && $0 < 0x7F }) else {
            return .failure(.malformedName("bytes other than printable ASCII"))
        }
        let text = String(decoding: name, as: UTF8.self)
        return parse(text).mapError { LoadCredentialRefusal.malformedName("\"\(text)\": \($0)") }
    }

    /// Parses `<random>/unit/<unit>/<ID>` (the abstract name without its leading NUL).
    static func parse(_ name: String) -> Result<LoadCredentialName, NameProblem> {
        let parts = name.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 4, parts[1] == "unit" else { return .failure(.notUnitForm) }
        let random = parts[0]
        guard (1...maximumRandomLength).contains(random.utf8.count), random.utf8.allSatisfy(isLowerHexDigit) else {
            return .failure(.random)
        }
        // Only services: the outermost unit of a process's cgroup (what it is checked against)
        // is a `.service` or a `.scope`, and the service manager starts no scope's processes.
        guard Reader.isUnitName(parts[2], type: ".service") else { return .failure(.unit) }
        guard isCredentialID(parts[3]) else { return .failure(.credentialID) }
        return .success(LoadCredentialName(unit: String(parts[2]), credentialID: String(parts[3])))
    }

    /// Whether `id` is a credential ID systemd takes (`credential_name_valid()`): 1–255 bytes of
    /// printable ASCII without `/` or `:`, and neither `.` nor `..`.
    public static func isCredentialID(_ id: Substring) -> Bool {
        guard (1...maximumIDLength).contains(id.utf8.count), id != ".", id != ".." else { return false }
        return id.utf8.allSatisfy { $0 >= 0x20 && $0 < 0x7F && $0 != UInt8(ascii: "/") && $0 != UInt8(ascii: ":") }
    }

    private static func isLowerHexDigit(_ byte: UInt8) -> Bool {
        (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains(byte)
    }

    /// Which part of a name is not systemd's form.
    enum NameProblem: Error, CustomStringConvertible {
        case notUnitForm, random, unit, credentialID

        var description: String {
            switch self {
            case .notUnitForm: "not of the form <random>/unit/<unit>/<ID>"
            case .random: "its first part is not 1–16 lower-case hex digits"
            case .unit: "its unit is not a valid .service name"
            case .credentialID: "its credential ID is not valid (1–255 printable ASCII characters, no '/' or ':', not '.' or '..')"
            }
        }
    }
}

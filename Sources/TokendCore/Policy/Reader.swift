/// One entry of a credential's reader list, as written in configuration and on the wire:
/// `uid:1000`, `user:alice`, `group:backup` (or `gid:34`).
public enum Reader: Sendable, Hashable, CustomStringConvertible {
    case uid(UInt32)
    case user(String)
    case gid(UInt32)
    case group(String)

    /// Parses `kind:value`; `nil` for anything else.
    public init?(_ text: some StringProtocol) {
        guard let colon = text.firstIndex(of: ":") else { return nil }
        let kind = text[..<colon]
        let value = String(text[text.index(after: colon)...])
        guard !value.isEmpty, !value.contains(where: { $0.isWhitespace || $0 == ":" }) else { return nil }
        switch kind {
        case "uid":
            guard let id = UInt32(value) else { return nil }
            self = .uid(id)
        case "gid":
            guard let id = UInt32(value) else { return nil }
            self = .gid(id)
        case "user": self = .user(value)
        case "group": self = .group(value)
        default: return nil
        }
    }

    public var description: String {
        switch self {
        case .uid(let id): "uid:\(id)"
        case .user(let name): "user:\(name)"
        case .gid(let id): "gid:\(id)"
        case .group(let name): "group:\(name)"
        }
    }
}

/// A reader list with names turned into numeric ids, ready to be checked against a caller.
///
/// Names are resolved at the edge (the daemon asks the system's user database when a credential
/// is loaded or added); a name that does not resolve grants nothing and is listed in
/// `unresolved`, so a typo fails closed.
public struct ResolvedReaders: Sendable, Hashable {
    public var uids: Set<UInt32>
    public var gids: Set<UInt32>
    public var unresolved: [Reader]

    public init(uids: Set<UInt32> = [], gids: Set<UInt32> = [], unresolved: [Reader] = []) {
        self.uids = uids
        self.gids = gids
        self.unresolved = unresolved
    }

    /// Resolves `readers` with the given lookups (pure: the lookups are passed in).
    public init(
        _ readers: [Reader],
        userID: (String) -> UInt32?,
        groupID: (String) -> UInt32?
    ) {
        self.init()
        for reader in readers {
            switch reader {
            case .uid(let id): uids.insert(id)
            case .gid(let id): gids.insert(id)
            case .user(let name):
                if let id = userID(name) { uids.insert(id) } else { unresolved.append(reader) }
            case .group(let name):
                if let id = groupID(name) { gids.insert(id) } else { unresolved.append(reader) }
            }
        }
    }
}

/// Whose turn a credential's grant waits in when grants queue (``RoundRobinQueue``): the lowest
/// uid among its readers, else its lowest group, else nobody in particular. A credential a user
/// enrolled for themself has that user's uid.
public enum CredentialOwner: Hashable, Sendable {
    case uid(UInt32)
    case gid(UInt32)
    case unresolved
}

extension ResolvedReaders {
    public var owner: CredentialOwner {
        if let uid = uids.min() { return .uid(uid) }
        if let gid = gids.min() { return .gid(gid) }
        return .unresolved
    }
}

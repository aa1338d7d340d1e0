// The reader grammar (`uid:`, `gid:`, `user:`, `group:`) is defined once, in TokendReaders,
// which TokendProtocol re-exports as well; the model and its stores use the same `Reader`.
@_exported import TokendReaders

/// A reader list with names turned into numeric ids, ready to be checked against a caller.
///
/// Names are resolved at the edge (the daemon asks the system's user database when a credential
/// is loaded or added); a name that does not resolve grants nothing and is listed in
/// `unresolved`, so a typo fails closed.
public struct ResolvedReaders: Sendable, Hashable {
    public var uids: Set<UInt32>
    public var gids: Set<UInt32>
    /// `unit:` and `exe:` readers, with the uid a combined reader joins to them. Empty for a
    /// credential read by users and groups only, whose checks then never look at programs.
    public var programs: [ProgramReader]
    public var unresolved: [Reader]

    public init(uids: Set<UInt32> = [], gids: Set<UInt32> = [], programs: [ProgramReader] = [], unresolved: [Reader] = []) {
        self.uids = uids
        self.gids = gids
        self.programs = programs
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
            case .unit(let name): programs.append(ProgramReader(uid: nil, program: .unit(name)))
            case .exe(let path, let sha256): programs.append(ProgramReader(uid: nil, program: .exe(path: path, sha256: sha256)))
            case .combined(.uid(let id), let program): programs.append(ProgramReader(uid: id, program: program))
            case .combined(.user(let name), let program):
                if let id = userID(name) { programs.append(ProgramReader(uid: id, program: program)) } else { unresolved.append(reader) }
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
        if let uid = programs.compactMap(\.uid).min() { return .uid(uid) }
        return .unresolved
    }
}

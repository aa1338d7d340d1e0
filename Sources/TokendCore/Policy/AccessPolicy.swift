/// The authorization rules for every call: who may read a credential, who is an administrator,
/// and who may enrol or remove a credential for themselves.
///
/// Pure: the daemon hands it the caller's identity (from the kernel) and the credential's
/// resolved readers, and carries out the decision.
public struct AccessPolicy: Sendable, Hashable {
    /// Members of these groups (and root) may call administrative methods.
    public var adminGroupIDs: Set<UInt32>
    /// Whether a non-administrator may add and remove credentials whose only reader is their
    /// own uid.
    public var allowSelfEnrolment: Bool

    public init(adminGroupIDs: Set<UInt32> = [], allowSelfEnrolment: Bool = true) {
        self.adminGroupIDs = adminGroupIDs
        self.allowSelfEnrolment = allowSelfEnrolment
    }

    /// Root, or a member of an admin group.
    public func isAdmin(_ caller: CallerIdentity) -> Bool {
        caller.uid == 0 || adminGroupIDs.contains(where: caller.isMember(of:))
    }

    /// Whether `caller` may receive the access token of a credential with these readers.
    /// Administrators do not read other users' tokens implicitly: reading is granted only by
    /// the reader list, so an admin that needs a token names itself as a reader.
    public func mayRead(_ caller: CallerIdentity, readers: ResolvedReaders) -> Bool {
        readDecision(caller, readers: readers, program: caller.programFacts(_:)) == .granted
    }

    /// Whether `caller` may read, and when not, why (for the log only: the caller gets the same
    /// refusal as any non-reader). `program` is asked for the caller's program facts only when
    /// no uid or group reader grants and a program reader could (uid-only credentials never
    /// ask), for what the readers need: the executable only for an `exe:` reader, its hash only
    /// after the facts show the path of an `@sha256:` reader.
    public func readDecision(
        _ caller: CallerIdentity, readers: ResolvedReaders,
        program: (_ need: ProgramFacts.Need) -> Result<ProgramFacts, ProgramFactsUnavailable>
    ) -> ReadDecision {
        if readers.uids.contains(caller.uid) || readers.gids.contains(where: caller.isMember(of:)) { return .granted }
        guard !readers.programs.isEmpty else { return .refused(why: nil) }
        let candidates = readers.programs.filter { $0.uid == nil || $0.uid == caller.uid }
        guard !candidates.isEmpty else { return .refused(why: "uid \(caller.uid) is joined to none of the program readers") }
        // The facts are those of the process that connected: they decide only a call it wrote.
        guard case .connector = caller.sender else { return .refused(why: "program readers not checked: \(caller.sender)") }
        // The executable is hashed only when an `@sha256:` reader names the path it runs from,
        // so a caller cannot make tokend hash any file it likes.
        let namesExecutables = candidates.contains {
            if case .exe = $0.program { return true }
            return false
        }
        var facts: ProgramFacts
        switch program(namesExecutables ? .executable : .unit) {
        case .failure(let unavailable): return .refused(why: "program readers not checked: \(unavailable)")
        case .success(let known): facts = known
        }
        let hashNeeded = candidates.contains {
            if case .exe(let path, _?) = $0.program { return path == facts.executable }
            return false
        }
        if hashNeeded && facts.sha256 == nil && facts.sha256Problem == nil {
            switch program(.hash) {
            case .failure(let unavailable): return .refused(why: "program readers not checked: \(unavailable)")
            case .success(let hashed): facts = hashed
            }
        }
        if let untrusted = facts.untrusted(forExecutables: namesExecutables) {
            return .refused(why: "program readers not checked: \(untrusted)")
        }
        var mismatches: [String] = []
        for candidate in candidates {
            guard let mismatch = candidate.match(uid: caller.uid, facts: facts) else { return .granted }
            mismatches.append(mismatch.description)
        }
        return .refused(why: mismatches.joined(separator: "; "))
    }

    /// Whether `caller` may see a credential's status (metadata only, never a token).
    public func mayInspect(_ caller: CallerIdentity, readers: ResolvedReaders) -> Bool {
        isAdmin(caller) || mayRead(caller, readers: readers)
    }

    /// Whether `caller` may add a credential with `readers`, or replace or remove one whose
    /// readers are `readers`: administrators any; others, when self-enrolment is allowed, one
    /// read by their own uid alone or by their uid joined to a program (`uid:N+unit:x.service`).
    public func mayManage(_ caller: CallerIdentity, readers: [Reader]) -> Bool {
        if isAdmin(caller) { return true }
        guard allowSelfEnrolment, readers.count == 1 else { return false }
        switch readers[0] {
        case .uid(let uid), .combined(.uid(let uid), _): return uid == caller.uid
        case .user, .gid, .group, .unit, .exe, .combined(.user, _): return false
        }
    }
}

/// The outcome of a read check.
public enum ReadDecision: Sendable, Hashable {
    case granted
    /// Refused; `why` names the program fact that did not match (for the log), `nil` when the
    /// credential has no program reader.
    case refused(why: String?)
}

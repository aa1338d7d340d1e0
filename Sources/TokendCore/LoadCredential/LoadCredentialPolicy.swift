/// What the `LoadCredential=` socket serves (`[load_credential]`): which credential an ID
/// names, in which form, and how long its token must stay valid.
public struct LoadCredentialSettings: Sendable, Hashable {
    /// What is written to the unit's credential file.
    public enum Format: String, Sendable, Hashable, CaseIterable {
        /// The access token alone, no newline.
        case token
        /// The `Credentials` object of `ProvideTokenReplacement` as JSON: `accessToken`,
        /// `tokenType`, `expiresAt`, `issuedAt`, `scope`, `userIdentifier`.
        case json
    }

    /// Where one credential ID leads (`load_credential.ids.<id>`).
    public struct Target: Sendable, Hashable {
        /// The credential's name (user identifier); `nil`: the ID itself.
        public var credential: String?
        /// The form; `nil`: ``LoadCredentialSettings/format``.
        public var format: Format?

        public init(credential: String? = nil, format: Format? = nil) {
            self.credential = credential
            self.format = format
        }
    }

    /// The token must be valid at least this long when it is delivered (`min_valid`).
    public var minimumValidity: Duration
    /// The longest a delivery waits for a refresh (`timeout`); the service manager waits meanwhile.
    public var timeout: Duration
    /// The form of IDs without their own (`format`).
    public var format: Format
    /// IDs that name another credential or want another form (`ids`).
    public var ids: [String: Target]

    public init(
        minimumValidity: Duration = .seconds(60), timeout: Duration = .seconds(20), format: Format = .token, ids: [String: Target] = [:]
    ) {
        self.minimumValidity = minimumValidity
        self.timeout = timeout
        self.format = format
        self.ids = ids
    }

    /// The credential and form the ID `id` asks for: its entry in ``ids``, else the credential
    /// of that name in ``format``.
    public func target(of id: String) -> (credential: String, format: Format) {
        let target = ids[id]
        return (target?.credential ?? id, target?.format ?? format)
    }
}

/// What tokend knows of a credential when it decides a delivery.
public struct LoadCredentialCandidate: Sendable {
    public var name: String
    public var readers: ResolvedReaders
    /// When the current token stops being served.
    public var deadline: Timestamp
    public var needsLogin: Bool
    public var isDPoPBound: Bool

    public init(name: String, readers: ResolvedReaders, deadline: Timestamp, needsLogin: Bool, isDPoPBound: Bool) {
        self.name = name
        self.readers = readers
        self.deadline = deadline
        self.needsLogin = needsLogin
        self.isDPoPBound = isDPoPBound
    }
}

/// Whether a checked request (``LoadCredentialCaller``) gets its credential's token now, after
/// a refresh, or nothing.
public enum LoadCredentialDecision: Sendable, Hashable {
    /// Write the current token.
    case deliver
    /// The token is valid for less than `minimumValidity`: refresh, then decide again.
    case refreshFirst(minimumValidity: Duration)
    case refuse(LoadCredentialRefusal)

    /// - Parameters:
    ///   - unit: the asking unit (checked).
    ///   - credential: the credential the ID names, `nil` when there is none of that name
    ///     (`name` is then the name looked for).
    ///   - minimumValidity: `load_credential.min_valid`.
    ///   - mayRefresh: `false` once a refresh was tried: a token still too short-lived is refused.
    public static func decide(
        unit: String, name: String, credential: LoadCredentialCandidate?, minimumValidity: Duration, now: Timestamp,
        mayRefresh: Bool
    ) -> LoadCredentialDecision {
        guard let credential else { return .refuse(.noSuchCredential(name)) }
        if let refusal = readerRefusal(unit: unit, credential: credential) { return .refuse(refusal) }
        if credential.needsLogin { return .refuse(.reauthenticationRequired(credential.name)) }
        if credential.isDPoPBound { return .refuse(.dpopBound(credential.name)) }
        switch ServeDecision.decide(deadline: credential.deadline, now: now, minimumValidity: minimumValidity) {
        case .serve:
            return .deliver
        case .tooShortLived, .expired:
            if mayRefresh { return .refreshFirst(minimumValidity: minimumValidity) }
            return .refuse(.tooShortLived(remaining: max(.zero, credential.deadline - now), minimum: minimumValidity))
        }
    }

    /// Only a plain `unit:` reader admits a unit here: a `uid:N+unit:…` reader is about the
    /// uid of the process that reads, and the service manager's helper reads as root whatever
    /// `User=` the service runs as; uid and group readers are about processes, not units.
    static func readerRefusal(unit: String, credential: LoadCredentialCandidate) -> LoadCredentialRefusal? {
        let naming = credential.readers.programs.filter { $0.program == .unit(unit) }
        if naming.contains(where: { $0.uid == nil }) { return nil }
        return .notAReader(credential: credential.name, unit: unit, joinedOnly: !naming.isEmpty)
    }
}

/// What an administrator asks of ``AdoptableStore/adopt(_:)``.
public struct StoreAdoptionRequest: Sendable, Hashable {
    /// Report what adoption would do, and change nothing.
    public var dryRun: Bool
    /// The store was restored from an older copy on purpose: serve its rows even where this
    /// node had seen newer ones.
    public var restored: Bool

    public init(dryRun: Bool = false, restored: Bool = false) {
        self.dryRun = dryRun
        self.restored = restored
    }
}

/// What adopting a shared store did (or, for a dry run, would do).
public struct StoreAdoptionReport: Sendable, Hashable {
    /// A credential adoption tagged, found older than the node had seen, or left refused.
    public struct Row: Sendable, Hashable {
        public var userIdentifier: String
        public var provider: String
        public var readers: [String]
        public var enrolledUID: Int64
        public var generation: Int64
        /// Why it stays refused, or what about it needs a look.
        public var problem: String?

        public init(
            userIdentifier: String, provider: String, readers: [String], enrolledUID: Int64, generation: Int64, problem: String? = nil
        ) {
            self.userIdentifier = userIdentifier
            self.provider = provider
            self.readers = readers
            self.enrolledUID = enrolledUID
            self.generation = generation
            self.problem = problem
        }
    }

    /// The store's id after adoption.
    public var storeID: String
    /// The id this node had recorded, when it differs from ``storeID`` (or the store had none).
    public var recordedStoreID: String?
    /// The schema version before and after.
    public var schemaVersionBefore: Int
    public var schemaVersion: Int
    /// Why the node held the store before, if it did.
    public var heldBecause: String?
    /// Rows without a tag, tagged as the last dry run showed them: check their readers.
    public var tagged: [Row]
    /// Rows whose tag of the earlier format checked out, tagged for this store.
    public var carriedOver: Int
    /// Rows older than this node had seen: served after a restore on purpose (`restored`), else
    /// still refused.
    public var rolledBack: [Row]
    /// Rows that stay refused, with the reason.
    public var refused: [Row]
    /// How many credentials the node serves from the store afterwards.
    public var credentials: Int
    public var dryRun: Bool
    public var restored: Bool

    public init(
        storeID: String, recordedStoreID: String?, schemaVersionBefore: Int, schemaVersion: Int, heldBecause: String?, tagged: [Row],
        carriedOver: Int, rolledBack: [Row], refused: [Row], credentials: Int, dryRun: Bool, restored: Bool
    ) {
        self.storeID = storeID
        self.recordedStoreID = recordedStoreID
        self.schemaVersionBefore = schemaVersionBefore
        self.schemaVersion = schemaVersion
        self.heldBecause = heldBecause
        self.tagged = tagged
        self.carriedOver = carriedOver
        self.rolledBack = rolledBack
        self.refused = refused
        self.credentials = credentials
        self.dryRun = dryRun
        self.restored = restored
    }
}

/// A store that a node serves only once it recognises it, and that an administrator can
/// confirm (the shared PostgreSQL store; `tokenctl store adopt`).
public protocol AdoptableStore: CredentialStore {
    /// Confirms the store as it is now: its id, its schema brought up to date, rows without a
    /// tag tagged as this node's last dry run showed them, and this node's record of it.
    func adopt(_ request: StoreAdoptionRequest) async throws -> StoreAdoptionReport

    /// Every credential's generation, by user identifier, to load what adoption let in.
    func generations() async throws -> [String: Int64]
}

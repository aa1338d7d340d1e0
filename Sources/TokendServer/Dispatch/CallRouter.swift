import Logging
import NIOCore
import TokendCore
import TokendJSON
import TokendProtocol
import TokendStorage

/// Routes each call to its method after checking the caller may make it.
///
/// Calls that memory can answer (a cached, valid token; status; introspection) are answered
/// synchronously on the event loop. Only calls that must wait (store writes, refreshes) leave
/// it, and those always come back with a reply before `callTimeout`.
struct CallRouter: Sendable {
    let view: CredentialView
    let registry: CredentialRegistry
    let settings: RuntimeSettings
    let daemonInfo: DaemonInfo
    let logger: Logger
    /// The wall clock; a parameter so tests could pin it, read once per call.
    let now: @Sendable () -> Timestamp
    /// Logins begun and not yet completed (shared by every connection's copy of the router).
    let loginSessions = LoginSessions()
    /// Calls waiting for an answer, per uid (shared by every connection's copy of the router).
    let callsInFlight = CallsInFlight()
    /// Open connections per uid, for the caller's usage in `Status`.
    let connections: ConnectionLimiter
    /// Where `Reload` asks for a reload and waits for its verdict.
    let reloads: ConfigurationReloads
    /// Those on the administrators' socket, counted with them.
    var administratorsConnections: ConnectionLimiter?
    /// The store's health, nodes and leases for `Status` (CallRouter+SharedStore.swift).
    var coordination: any RefreshCoordination = LocalRefreshCoordination()
    /// Readers that grant nothing on this host, said at enrolment and in `Status` (nil: not judged).
    var readerWarnings: ReaderWarnings?
    /// What tokend found at start that does not do what the configuration says, for
    /// administrators' `Status` (a `socket_mode` the passed socket does not have).
    var setupWarnings = SetupWarnings()
    /// The audit trail of token releases and refusals (``AuditTrail``).
    var auditTrail = AuditTrail.disabled
    /// This connection's audit, in the copy of the router a connection holds
    /// (``VarlinkConnectionHandler``); nil in the listener's.
    var audit: ConnectionAudit?

    /// Answers `call`, whose method the connection parsed into `method` (nil: not served).
    func route(_ call: VarlinkCall, method: ServedMethod?, caller: CallerIdentity, eventLoop: any EventLoop) -> CallOutcome {
        let outcome: CallOutcome
        do throws(VarlinkError) {
            guard let method else { throw ServedMethod.notServed(call.method) }
            try admit(call, method.descriptor, caller: caller)
            outcome = try dispatch(call, method, caller: caller, eventLoop: eventLoop)
        } catch {
            outcome = .reply(ErrorReplies.encode(error))
        }
        // A oneway call gets no reply, whatever happened.
        if call.oneway, case .deferred = outcome { return outcome.discardingReplies(on: eventLoop) }
        return call.oneway ? .none : outcome
    }

    /// What the descriptor asks of every call before its handler runs: administrators only,
    /// `more`. Every other check of the caller is the handler's, against the credential or the
    /// login the call names.
    private func admit(_ call: VarlinkCall, _ descriptor: MethodDescriptor, caller: CallerIdentity) throws(VarlinkError) {
        switch descriptor.callers {
        case .administrators:
            guard settings.current.accessPolicy.isAdmin(caller) else {
                logDenied(caller, method: call.method, user: nil)
                throw .permissionDenied(nil)
            }
        case .anyone, .anyoneSeeingWhatTheyMayInspect, .credentialReaders, .credentialManagers, .loginOwner:
            break
        }
        if descriptor.requiresMore, !call.more { throw .expectedMore }
    }

    /// One handler per method: a `switch` without `default:`, so a method without a route does
    /// not compile.
    private func dispatch(_ call: VarlinkCall, _ method: ServedMethod, caller: CallerIdentity, eventLoop: any EventLoop)
        throws(VarlinkError) -> CallOutcome
    {
        switch method {
        case .tokenProvider(.provideTokenReplacement):
            return try provideTokenReplacement(call, caller: caller, eventLoop: eventLoop)
        case .tokenProvider(.provideDPoPProof):
            return try provideDPoPProof(call, caller: caller, eventLoop: eventLoop)
        case .tokenProvider(.status):
            return try status(call, caller: caller)
        case .tokenProvider(.watch):
            let user = try ParameterReader(call.parameters).string("userIdentifier")
            let entry = try readableEntry(user, caller: caller, method: call.method)
            return .watch(userIdentifier: user, initial: entry)
        case .tokenProvider(.watchReloginWarnings):
            return watchReloginWarnings(caller: caller)
        case .tokenProvider(.addCredential):
            let request = try AddCredentialRequest(json: call.parameters)
            let warnings = readerWarnings?.problems(texts: request.readers ?? []) ?? []
            return deferred(on: eventLoop, caller: caller, what: "adding the credential") { [registry] in
                try await registry.add(request, caller: caller)
                return [reply(warnings.isEmpty ? [:] : ["warnings": .array(warnings.map(JSONValue.string))])]
            }
        case .tokenProvider(.removeCredential):
            let parameters = ParameterReader(call.parameters)
            let user = try parameters.string("userIdentifier")
            let anyway = try parameters.optionalBool("revokeAnyway") ?? false
            // Revoking what a caller added could kill a grant behind someone else's credential
            // (``RevocationRule``): only an administrator asks it, knowing where the tokens came from.
            if anyway, !settings.current.accessPolicy.isAdmin(caller) {
                logDenied(caller, method: call.method, user: user)
                throw .permissionDenied(user, reason: "only administrators may revoke tokens tokend did not get from the provider")
            }
            return deferred(on: eventLoop, caller: caller, what: "removing the credential") { [registry] in
                let result = try await registry.remove(user, caller: caller, revokeAnyway: anyway)
                return [reply(result.json)]
            }
        case .tokenProvider(.rotateKey):
            return deferred(on: eventLoop, caller: caller, what: "rotating the key") { [registry] in
                let (keyID, count) = try await registry.rotateKey(caller: caller)
                return [reply(["keyId": .string(keyID), "reencrypted": .int(Int64(count))])]
            }
        case .tokenProvider(.backup):
            return deferred(on: eventLoop, caller: caller, what: "backing up the store", timeout: Self.backupTimeout) { [registry] in
                BackupReplies.encode(try await registry.backup(caller: caller))
            }
        case .tokenProvider(.reload):
            return deferred(on: eventLoop, caller: caller, what: "reloading the configuration") { [reloads] in
                switch await reloads.requestAndWait() {
                case .applied(let file, let providers, let restartNeeded):
                    var parameters: JSONObject = [
                        "providers": .array(providers.map(JSONValue.string)),
                        "restartNeeded": .array(restartNeeded.map(JSONValue.string)),
                    ]
                    parameters.setIfPresent("file", file.map(JSONValue.string))
                    return [reply(parameters)]
                case .refused(let reason):
                    throw VarlinkError.configurationInvalid(reason)
                }
            }
        case .tokenProvider(.adoptStore):
            let request = try StoreAdoptionReplies.request(call.parameters)
            return deferred(on: eventLoop, caller: caller, what: "adopting the store", timeout: Self.backupTimeout) { [registry] in
                [reply(StoreAdoptionReplies.parameters(try await registry.adoptStore(request, caller: caller)))]
            }
        case .tokenProvider(.beginLogin):
            return try beginLogin(call, caller: caller, eventLoop: eventLoop)
        case .tokenProvider(.completeLogin):
            return try completeLogin(call, caller: caller, eventLoop: eventLoop)
        case .tokenProvider(.cancelLogin):
            return try cancelLogin(call, caller: caller, eventLoop: eventLoop)
        case .varlinkService(.getInfo):
            return .reply(reply(daemonInfo.getInfoParameters))
        case .varlinkService(.getInterfaceDescription):
            let interface = try ParameterReader(call.parameters).string("interface")
            switch interface {
            case TokenProviderInterface.name: return .reply(reply(["description": .string(TokenProviderInterface.description)]))
            case VarlinkServiceInterface.name: return .reply(reply(["description": .string(VarlinkServiceInterface.description)]))
            default: throw .interfaceNotFound(interface)
            }
        }
    }

    /// A backup copies the whole store, and adopting a shared store reads every row: either may
    /// take longer than a token call.
    static let backupTimeout = Duration.seconds(300)

    // MARK: ProvideTokenReplacement

    private func provideTokenReplacement(_ call: VarlinkCall, caller: CallerIdentity, eventLoop: any EventLoop) throws(VarlinkError)
        -> CallOutcome
    {
        let parameters = ParameterReader(call.parameters)
        let user = try parameters.string("userIdentifier")
        let minValidSeconds = try parameters.optionalInt("minValidSeconds") ?? 0
        guard minValidSeconds >= 0, minValidSeconds <= 366 * 86400 else { throw .invalidParameter("minValidSeconds") }
        let rejectedToken = try parameters.optionalString("rejectedToken")
        let (scope, resource) = (try parameters.optionalString("scope"), try parameters.optionalString("resource"))
        let narrowing: TokenNarrowing?
        do throws(NarrowingParameterError) {
            narrowing = try TokenNarrowing(scope: scope, resource: resource)
        } catch {
            throw .invalidParameter(error.parameter)
        }

        let entry = try readableEntry(user, caller: caller, method: call.method)
        if let narrowing {
            return narrowedToken(
                user, narrowing: narrowing, entry: entry, minimumValidity: .seconds(minValidSeconds), rejectedToken: rejectedToken,
                caller: caller, eventLoop: eventLoop)
        }
        let now = now()
        let decision = ServeDecision.decide(deadline: entry.deadline, now: now, minimumValidity: .seconds(minValidSeconds))
        // `rejectedToken` equal to the current token: the API refused it, so it must be replaced.
        // Any other value is a token already replaced; the current one is the answer.
        let rejectedCurrent = rejectedToken.map { ConstantTime.equal($0, entry.accessToken) } ?? false
        if decision == .serve, !rejectedCurrent {
            audit?.released(entry, to: caller, method: call.method)
            return .reply(entry.replyBytes)
        }
        let reason: RefreshReason =
            rejectedCurrent ? .rejectedByAPI(generation: entry.generation) : .tooShortLived(minimumValidity: .seconds(minValidSeconds))
        return deferred(
            on: eventLoop, caller: caller, what: "refreshing the token",
            timeoutError: { timeout in
                .refreshFailed(
                    user, reason: "no fresh token within the call timeout (\(DurationFormat.humanReadable(timeout)))", retryAt: nil)
            }
        ) { [registry, self] in
            let fresh = try await self.recordingLoginEnd(user, caller: caller) {
                try await registry.freshEntry(for: user, reason: reason, caller: caller)
            }
            // The credential may have been replaced while the call waited: the caller gets the
            // entry it finally returns only if it may read that one.
            try self.checkStillReadable(fresh, caller: caller, method: TokenProviderMethod.provideTokenReplacement.rawValue)
            self.audit?.released(fresh, to: caller, method: TokenProviderMethod.provideTokenReplacement.rawValue)
            return [fresh.replyBytes]
        }
    }

    /// `ProvideTokenReplacement` with `scope` or `resource`: the kept narrowed token, answered on
    /// the event loop while it serves, else the registry's (``CredentialRegistry/narrowedToken(for:narrowing:minimumValidity:rejectedToken:)``).
    private func narrowedToken(
        _ user: String, narrowing: TokenNarrowing, entry: ViewEntry, minimumValidity: Duration, rejectedToken: String?,
        caller: CallerIdentity, eventLoop: any EventLoop
    ) -> CallOutcome {
        if let kept = view.narrowedTokens.lookup(user, key: narrowing.key, enrolment: entry.enrolment),
            kept.serves(now: now(), minimumValidity: minimumValidity, rejectedToken: rejectedToken)
        {
            audit?.released(kept, of: user, narrowing: narrowing, to: caller, method: TokenProviderMethod.provideTokenReplacement.rawValue)
            return .reply(kept.replyBytes)
        }
        return deferred(
            on: eventLoop, caller: caller, what: "getting a narrowed token",
            timeoutError: { timeout in
                .refreshFailed(
                    user, reason: "no narrowed token within the call timeout (\(DurationFormat.humanReadable(timeout)))", retryAt: nil)
            }
        ) { [registry, view, self] in
            let serving = try await self.recordingLoginEnd(user, caller: caller) {
                try await registry.narrowedToken(
                    for: user, narrowing: narrowing, minimumValidity: minimumValidity, rejectedToken: rejectedToken)
            }
            // As for the credential's own token: checked against the credential as it is now.
            guard let current = view[user] else {
                throw self.missing(user, caller: caller, method: TokenProviderMethod.provideTokenReplacement.rawValue)
            }
            try self.checkStillReadable(current, caller: caller, method: TokenProviderMethod.provideTokenReplacement.rawValue)
            guard current.enrolment == serving.enrolment else {
                throw VarlinkError.refreshFailed(
                    user, reason: "the credential was replaced while its narrowed token was got; ask again", retryAt: nil)
            }
            self.audit?.released(
                serving, of: user, narrowing: narrowing, to: caller, method: TokenProviderMethod.provideTokenReplacement.rawValue)
            return [serving.replyBytes]
        }
    }

    /// `work`, a wait for a token; a wait that ends because the login has ended is a refusal on
    /// the audit trail, as a call that comes after it is (``readableEntry(_:caller:method:)``).
    func recordingLoginEnd<Result>(_ user: String, caller: CallerIdentity, _ work: () async throws -> Result) async throws -> Result {
        do {
            return try await work()
        } catch let error as VarlinkError where error.name == TokendErrorName.reauthenticationRequired.rawValue {
            audit?.refused(user, to: caller, method: TokenProviderMethod.provideTokenReplacement.rawValue, reason: AuditRefusal.loginEnded)
            throw error
        }
    }

    /// After a wait: whether `caller` may read `entry`, the entry the call is about to answer
    /// with (a replacement may have given it other readers meanwhile).
    func checkStillReadable(_ entry: ViewEntry, caller: CallerIdentity, method: String) throws(VarlinkError) {
        guard case .refused(let why) = readDecision(caller, entry) else { return }
        refuseReader(caller, method: method, user: entry.userIdentifier, why: why)
        throw .permissionDenied(entry.userIdentifier)
    }

    /// The answer for a credential `user` that does not exist: the truth for administrators; for
    /// anyone else the same answer as for a credential they may not use, so that nobody learns
    /// which names exist.
    func missing(_ user: String, caller: CallerIdentity, method: String) -> VarlinkError {
        if AuditRefusal.isTokenMethod(method) { audit?.refused(user, to: caller, method: method, reason: AuditRefusal.noSuchCredential) }
        if settings.current.accessPolicy.isAdmin(caller) { return .unknownUser(user) }
        logDenied(caller, method: method, user: user)
        return .permissionDenied(user)
    }

    /// An error of work that waited, as `caller` may see it: a credential removed meanwhile is
    /// answered as ``missing(_:caller:method:)`` answers, so a reader that waited learns no more
    /// than one that asked afterwards.
    func asSeen(by caller: CallerIdentity, _ error: VarlinkError, what: String) -> VarlinkError {
        guard error.name == TokendErrorName.unknownUser.rawValue, case .string(let user)? = error.parameters["userIdentifier"] else {
            return error
        }
        return missing(user, caller: caller, method: what)
    }

    /// The entry of `user` if `caller` may read its token and it may still be served.
    func readableEntry(_ user: String, caller: CallerIdentity, method: String) throws(VarlinkError) -> ViewEntry {
        guard let entry = view[user] else { throw missing(user, caller: caller, method: method) }
        if case .refused(let why) = readDecision(caller, entry) {
            refuseReader(caller, method: method, user: user, why: why)
            throw .permissionDenied(user)
        }
        if entry.status.state == .reauthenticationRequired {
            audit?.refused(user, to: caller, method: method, reason: AuditRefusal.loginEnded)
            throw .reauthenticationRequired(user, reason: entry.status.lastError ?? "the login has ended")
        }
        return entry
    }

    /// Whether `caller` may still read `entry` (a watcher's rights are re-checked on every update).
    func mayRead(_ caller: CallerIdentity, _ entry: ViewEntry) -> Bool {
        settings.current.accessPolicy.mayRead(caller, readers: entry.resolvedReaders)
    }

    /// As ``mayRead(_:_:)``, with why not (which program fact did not match) for the log.
    func readDecision(_ caller: CallerIdentity, _ entry: ViewEntry) -> ReadDecision {
        settings.current.accessPolicy.readDecision(caller, readers: entry.resolvedReaders, program: caller.programFacts(_:))
    }

    var hub: WatchHub { view.hub }

    // MARK: Status

    private func status(_ call: VarlinkCall, caller: CallerIdentity) throws(VarlinkError) -> CallOutcome {
        let user = try ParameterReader(call.parameters).optionalString("userIdentifier")
        let now = now()
        let policy = settings.current.accessPolicy
        let administrator = policy.isAdmin(caller)
        // Someone who is not an administrator learns about their own credentials only: counts of
        // theirs, no node names, and that the store is unavailable but not the database's words.
        // An administrator's counts are the view's, kept as credentials change; another caller's
        // are counted over the credentials their uid and groups might read, never over all.
        func visibleToCaller() -> [ViewEntry] {
            view.entriesPossiblyReadable(by: caller).filter { policy.mayInspect(caller, readers: $0.resolvedReaders) }
        }
        func daemon(_ visible: [ViewEntry]?) -> JSONObject {
            var fields = daemonStatus(visible.map { ViewSummary.counts(of: $0, now: now) } ?? view.counts(now: now))
            addStoreStatus(&fields, administrator: administrator)
            fields.caller = usage(of: caller)
            if administrator {
                // Only program readers can grant nothing here: without any, no credential is walked.
                let readers = view.programReaders.isPresent ? readerWarnings?.summary(of: view.unsortedSnapshot()) : nil
                let warnings = setupWarnings.all + [readers].compactMap { $0 }
                fields.warnings = warnings.isEmpty ? nil : warnings
            }
            return fields.json
        }
        let leases = administrator ? coordination.leaseHolders() : [:]
        if let user {
            guard let entry = view[user] else { throw missing(user, caller: caller, method: call.method) }
            guard policy.mayInspect(caller, readers: entry.resolvedReaders) else {
                logDenied(caller, method: call.method, user: user)
                throw .permissionDenied(user)
            }
            return .reply(
                reply([
                    "daemon": .object(daemon(administrator ? nil : visibleToCaller())),
                    "credentials": .array([.object(withLease(entry.credentialStatus(now: now), leases).json)]),
                ]))
        }
        // Sorted only when listed.
        let visible = administrator ? view.snapshot() : visibleToCaller().sorted { $0.userIdentifier < $1.userIdentifier }
        let daemon = daemon(administrator ? nil : visible)
        func statuses(_ entries: ArraySlice<ViewEntry>) -> JSONValue {
            .array(entries.map { JSONValue.object(withLease($0.credentialStatus(now: now), leases).json) })
        }
        guard call.more else {
            return .reply(reply(["daemon": .object(daemon), "credentials": statuses(visible[...])]))
        }
        // Streamed in batches so that no single message grows with the number of credentials;
        // each batch's JSON values are built just before it is encoded and then dropped.
        let batchSize = 100
        var messages: [[UInt8]] = []
        messages.reserveCapacity(visible.count / batchSize + 1)
        var start = 0
        repeat {
            let end = min(start + batchSize, visible.count)
            let batch = statuses(visible[start..<end])
            let parameters: JSONObject = start == 0 ? ["daemon": .object(daemon), "credentials": batch] : ["credentials": batch]
            var bytes: [UInt8] = []
            VarlinkReply(parameters: parameters, continues: end < visible.count).encode(into: &bytes)
            messages.append(bytes)
            start = end
        } while start < visible.count
        return .replies(messages)
    }

    /// What `caller`'s uid holds against its per-uid limits.
    private func usage(of caller: CallerIdentity) -> QuotaUsage {
        let current = settings.current
        // The program tokend sees for this caller, so a refused program can be told why.
        let facts = try? caller.programFacts(.executable).get()
        return QuotaUsage(
            uid: Int64(caller.uid), administrator: current.accessPolicy.isAdmin(caller),
            connections: Int64(
                connections.openConnections(uid: caller.uid) + (administratorsConnections?.openConnections(uid: caller.uid) ?? 0)),
            maxConnections: Int64(current.quotas.connectionsPerUID),
            credentials: Int64(view.countHeld(by: caller.uid)), maxCredentials: Int64(current.quotas.credentialsPerUID),
            callsInFlight: Int64(callsInFlight.count(uid: caller.uid)), maxCallsInFlight: Int64(current.quotas.callsInFlightPerUID),
            unit: facts?.unit, executable: facts?.executable
        )
    }

    private func daemonStatus(_ counts: ViewSummary.Counts) -> DaemonStatus {
        DaemonStatus(
            version: daemonInfo.version, startedAt: daemonInfo.startedAt.secondsSince1970, credentials: Int64(counts.credentials),
            valid: Int64(counts.valid), refreshing: Int64(counts.refreshing), retrying: Int64(counts.retrying),
            reauthenticationRequired: Int64(counts.reauthenticationRequired), expired: Int64(counts.expired),
            nextRefreshAt: counts.nextRefreshAt?.secondsSince1970)
    }

    // MARK: Helpers

    func reply(_ parameters: JSONObject) -> [UInt8] {
        var bytes: [UInt8] = []
        VarlinkReply(parameters: parameters).encode(into: &bytes)
        return bytes
    }

    /// `caller` is not among `user`'s readers: logged, and on the audit trail.
    func refuseReader(_ caller: CallerIdentity, method: String, user: String, why: String?) {
        logDenied(caller, method: method, user: user, why: why)
        audit?.refused(user, to: caller, method: method, reason: AuditRefusal.notAReader(why))
    }

    func logDenied(_ caller: CallerIdentity, method: String, user: String?, why: String? = nil) {
        var metadata: Logger.Metadata = [
            "uid": "\(caller.uid)", "gid": "\(caller.gid)", "pid": "\(caller.pid)", "method": "\(method)",
            "user_identifier": "\(user ?? "-")",
        ]
        if let why { metadata["program"] = "\(why)" }
        logger.notice("permission denied", metadata: metadata)
    }

    /// Runs `work` off the event loop and turns its result into replies, answering with an
    /// error when it throws or takes longer than the call timeout (or `timeout`, for calls
    /// that wait on a person, such as a login).
    func deferred(
        on eventLoop: any EventLoop,
        caller: CallerIdentity,
        what: String,
        timeout: Duration? = nil,
        timeoutError: @escaping @Sendable (Duration) -> VarlinkError = { timeout in
            .storageFailed("timed out after \(DurationFormat.humanReadable(timeout))")
        },
        _ work: @escaping @Sendable () async throws -> [[UInt8]]
    ) -> CallOutcome {
        let current = settings.current
        let timeout = timeout ?? current.callTimeout
        let uid = caller.uid
        if let (refusal, log) = callsInFlight.begin(uid: uid, isAdmin: current.accessPolicy.isAdmin(caller), quotas: current.quotas) {
            if log {
                logger.notice(
                    "call refused: per-user limit reached",
                    metadata: [
                        "uid": "\(uid)", "pid": "\(caller.pid)", "quota": "\(refusal.quota.rawValue)", "limit": "\(refusal.limit)",
                    ])
            }
            return .reply(ErrorReplies.encode(.quotaExceeded(refusal.quota.rawValue, limit: refusal.limit)))
        }
        let promise = eventLoop.makePromise(of: [[UInt8]].self)
        promise.futureResult.whenComplete { [callsInFlight] _ in callsInFlight.end(uid: uid) }
        let done = NIOLoopBoundBox(false, eventLoop: eventLoop)
        let timer = eventLoop.scheduleTask(in: .milliseconds(timeout.milliseconds)) {
            guard !done.value else { return }
            done.value = true
            promise.succeed([ErrorReplies.encode(timeoutError(timeout))])
        }
        let task = Task {
            let messages: [[UInt8]]
            do {
                messages = try await work()
            } catch let error as VarlinkError {
                messages = [ErrorReplies.encode(self.asSeen(by: caller, error, what: what))]
            } catch {
                messages = [ErrorReplies.internalError("\(error)")]
            }
            eventLoop.execute {
                guard !done.value else { return }
                done.value = true
                timer.cancel()
                promise.succeed(messages)
            }
        }
        _ = task
        return .deferred(promise.futureResult)
    }
}

extension CallOutcome {
    /// For oneway calls: the work still happens (and still orders the calls after it), its
    /// replies are dropped.
    func discardingReplies(on eventLoop: any EventLoop) -> CallOutcome {
        if case .deferred(let future) = self { return .deferred(future.map { _ in [] }) }
        return .none
    }
}

/// Facts about this daemon for `GetInfo` and `Status`.
struct DaemonInfo: Sendable {
    static let version = TokendVersion.string
    let version: String
    let startedAt: Timestamp

    var getInfoParameters: JSONObject {
        [
            "vendor": .string("tokend"),
            "product": .string("tokend"),
            "version": .string(version),
            "url": .string("file:///usr/share/doc/tokend/README.md"),
            "interfaces": .array([.string(VarlinkServiceInterface.name), .string(TokenProviderInterface.name)]),
        ]
    }
}

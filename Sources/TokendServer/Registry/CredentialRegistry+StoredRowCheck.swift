import TokendCore
import TokendProtocol
import TokendStorage

/// Enrolment writes conditional on the row they were checked against: a node's view may lag
/// behind a shared store, so the store tests in the write itself that the row is still the one
/// (or still absent) that ``Enrolments`` checked the caller's permission against.
extension CredentialRegistry {
    /// Stores an added credential on condition that the stored row is still the view's entry
    /// (or that there is none). If it is not, the stored row is read into the view, the
    /// placement checked again against it, and the write tried once more. Call under the
    /// user's lock.
    func insertChecked(_ credential: Credential, request: AddCredentialRequest, caller: CallerIdentity) async throws(VarlinkError)
        -> Credential
    {
        let user = request.userIdentifier
        // Bounded: one write, and one more after a check against the stored row.
        for attempt in 0..<2 {
            do {
                return try await store.insert(
                    credential, replacing: request.replace, expecting: StoredRowExpectation(seen: view[user]?.generation))
            } catch let error as StorageError where error.code == .alreadyExists {
                throw .credentialExists(user)
            } catch let error as StorageError where error.code == .conflict && attempt == 0 {
                logger.info(
                    "the stored credential is not the one this node knew; checking the request against it",
                    metadata: ["user_identifier": "\(user)"])
                let current: Credential?
                do {
                    current = try await store.load(userIdentifier: user)
                } catch {
                    logger.error("reading a credential failed: \(error)", metadata: ["user_identifier": "\(user)"])
                    throw .storageFailed("the credential could not be stored")
                }
                if let current {
                    publishStored(current)
                } else if view[user] != nil {
                    view.remove(user)
                    scheduler.cancel(user)
                    grants.forget(user)
                }
                // The caller's own add is counted once, as on the first check.
                enrolments.release(caller)
                defer { enrolments.reserve(caller) }
                try enrolments.place(
                    user: user, replace: request.replace, caller: caller, settings: settings.current, view: view, action: "replace")
            } catch {
                logger.error("storing a credential failed: \(error)", metadata: ["user_identifier": "\(user)"])
                throw .storageFailed("the credential could not be stored")
            }
        }
        throw .storageFailed("the credential changed on another node while it was being stored; try again")
    }
}

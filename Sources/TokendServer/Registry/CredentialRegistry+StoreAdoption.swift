import TokendCore
import TokendProtocol
import TokendStorage

/// An administrator confirms the shared store (`tokenctl store adopt`).
extension CredentialRegistry {
    /// Adopts the shared store as it is (administrators only; the router checks), then loads
    /// what adoption let in.
    func adoptStore(_ request: StoreAdoptionRequest, caller: CallerIdentity) async throws(VarlinkError) -> StoreAdoptionReport {
        guard let adoptable = store as? any AdoptableStore else {
            throw .storageFailed("this tokend keeps its credentials in its own SQLite store; only a shared PostgreSQL store is adopted")
        }
        let report: StoreAdoptionReport
        do {
            report = try await adoptable.adopt(request)
        } catch let error as StorageError {
            logger.error("adopting the shared store failed: \(error)", metadata: ["uid": "\(caller.uid)", "pid": "\(caller.pid)"])
            throw .storageFailed("the store could not be adopted: \(error.message)")
        } catch {
            logger.error("adopting the shared store failed: \(error)", metadata: ["uid": "\(caller.uid)", "pid": "\(caller.pid)"])
            throw .storageFailed("the store could not be adopted")
        }
        guard !request.dryRun else { return report }
        logger.notice(
            "shared store adopted by an administrator",
            metadata: ["uid": "\(caller.uid)", "pid": "\(caller.pid)", "credentials": "\(report.credentials)"])
        do {
            await reconcile(with: try await adoptable.generations())
        } catch {
            // The change feed's next reconciliation loads them.
            logger.warning(
                "loading the adopted store's credentials failed; the next reconciliation retries", metadata: ["problem": "\(error)"])
        }
        return report
    }
}

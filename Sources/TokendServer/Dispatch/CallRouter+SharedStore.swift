import TokendCore
import TokendProtocol
import TokendStorage

/// The store's health, the nodes and the refresh leases in `Status`.
extension CallRouter {
    /// What a caller who is not an administrator is told when the store cannot be reached
    /// (the database's own error names its host and says how it failed).
    static let storeProblemForUsers = "the credential store cannot be reached"

    /// Adds the store's kind and health, and for administrators with a shared store the node
    /// names and why the store cannot be reached.
    func addStoreStatus(_ status: inout DaemonStatus, administrator: Bool) {
        let health = coordination.health()
        status.store = health.kind
        guard administrator else {
            status.storeProblem = health.problem.map { _ in Self.storeProblemForUsers }
            return
        }
        status.storeProblem = health.problem
        if let node = coordination.nodeName {
            status.node = node
            status.nodes = coordination.nodes()
        }
    }

    /// A credential's status with the node that holds its refresh lease, if any.
    func withLease(_ status: CredentialStatus, _ leases: [String: LeaseHolder]) -> CredentialStatus {
        guard let lease = leases[status.userIdentifier] else { return status }
        var status = status
        status.leaseHolder = lease.holder
        status.leaseExpiresAt = lease.expiresAt.secondsSince1970
        return status
    }
}

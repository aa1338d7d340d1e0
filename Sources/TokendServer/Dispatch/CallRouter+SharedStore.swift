import TokendCore
import TokendProtocol
import TokendStorage

/// The store's health, the nodes and the refresh leases in `Status`.
extension CallRouter {
    /// Adds the store's kind and health, and with a shared store the node names.
    func addStoreStatus(_ status: inout DaemonStatus) {
        let health = coordination.health()
        status.store = health.kind
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

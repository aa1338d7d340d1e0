import TokendCore
import TokendStorage

/// What a node found when it asked whether it may refresh a credential now.
enum LeaseStep: Sendable {
    /// Refresh now, then release the lease.
    case granted(RefreshLease)
    /// No grant from this node: another node's result (or an error) is the answer.
    case settled(GrantResult)
}

/// Where every grant passes before it marks its credential and after it commits. The refresh
/// executor goes through it without knowing whether the store is shared: a single host
/// (``SingleHostGate``) is always let through; nodes sharing a store (``SharedStoreGate``)
/// take the credential's refresh lease or wait for the node that holds it.
protocol RefreshGate: Sendable {
    /// Before a grant of `user`: the lease, or the result that makes the grant unnecessary.
    /// Runs on the registry's actor.
    func enter(_ user: String, registry: isolated CredentialRegistry) async -> LeaseStep
    /// After the grant's result is committed. Runs on the registry's actor.
    func leave(_ lease: RefreshLease, registry: isolated CredentialRegistry) async
    /// Why this store's master key cannot be rotated from here, if it cannot.
    var keyRotationRefusal: String? { get }
    /// How this node takes over the credentials of a node that dies mid-grant; nil on a single host.
    var takeOver: TakeOverCheck? { get }
}

/// A store only this daemon uses: the registry's single flight is all the coordination there
/// is.
struct SingleHostGate: RefreshGate {
    func enter(_ user: String, registry: isolated CredentialRegistry) async -> LeaseStep {
        .granted(RefreshLease(userIdentifier: user, holder: "", fencing: 0, expiresAt: Timestamp(millisecondsSince1970: .max)))
    }

    func leave(_ lease: RefreshLease, registry: isolated CredentialRegistry) async {}

    var keyRotationRefusal: String? { nil }

    var takeOver: TakeOverCheck? { nil }
}

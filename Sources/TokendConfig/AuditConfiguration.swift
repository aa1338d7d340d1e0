/// The audit trail (`[audit]`): a journal record of every release and refusal of a token.
///
/// Off by default, as Vault's audit devices and SPIRE's audit log are: a connection's repeated
/// reads of one token cost only a count, but each new connection's first record reads the caller's
/// unit and executable from `/proc` and writes a journal entry, measured at about 60 µs of CPU,
/// which a program that connects per call pays on every call (docs/operations.md, "Audit trail").
public struct AuditConfiguration: Sendable, Hashable {
    /// Whether releases and refusals are recorded (`enabled`).
    public var enabled: Bool

    /// - Parameter enabled: Whether releases and refusals are recorded.
    public init(enabled: Bool = false) {
        self.enabled = enabled
    }
}

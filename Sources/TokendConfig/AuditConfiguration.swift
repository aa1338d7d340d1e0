/// The audit trail (`[audit]`): a journal record of every release and refusal of a token.
///
/// On by default: "who read this token?" is asked after the fact, when turning it on is too
/// late, and a connection's repeated reads of one token cost a count, not a record
/// (docs/operations.md, "Audit trail").
public struct AuditConfiguration: Sendable, Hashable {
    /// Whether releases and refusals are recorded (`enabled`).
    public var enabled: Bool

    /// - Parameter enabled: Whether releases and refusals are recorded.
    public init(enabled: Bool = true) {
        self.enabled = enabled
    }
}

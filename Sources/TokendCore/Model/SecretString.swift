/// A token or other secret. Its `description` never shows the value, so a secret interpolated
/// into a log line or an error message by mistake prints `<redacted>` instead.
public struct SecretString: Sendable, Hashable, CustomStringConvertible, CustomDebugStringConvertible {
    /// The secret itself. Read it only where it is sent to its destination.
    public let value: String

    public init(_ value: String) { self.value = value }

    public var description: String { "<redacted>" }
    public var debugDescription: String { "<redacted \(value.utf8.count) bytes>" }
    public var isEmpty: Bool { value.isEmpty }
}

extension SecretString: CustomReflectable {
    /// No children, so `dump` and other reflection-based printing cannot show the value either.
    public var customMirror: Mirror { Mirror(self, children: [], displayStyle: .struct) }
}

/// A configuration that cannot be used, with the file, the key and the problem, so one line
/// tells the administrator exactly what to fix.
public struct ConfigurationError: Error, Sendable, Hashable, CustomStringConvertible {
    public var file: String
    /// The dotted key path, e.g. `providers.example.client_secret_file`; empty for the file as a whole.
    public var key: String
    public var problem: String

    public init(file: String, key: String, problem: String) {
        self.file = file
        self.key = key
        self.problem = problem
    }

    public var description: String {
        key.isEmpty ? "\(file): \(problem)" : "\(file): \(key): \(problem)"
    }
}

import ArgumentParser
import TokendClient

/// The `--reader` options of `add` and `login`.
enum ReaderOptions {
    /// Checks each `--reader` value, naming the option and the problem of the first bad one.
    static func validate(_ readers: [String]) throws {
        for reader in readers {
            do {
                _ = try ReaderSpecifier.parse(reader)
            } catch {
                throw ValidationError("--reader: \(error.description).")
            }
        }
    }
}

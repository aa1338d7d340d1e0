/// A parsed configuration document, independent of the TOML library, so validation is plain
/// Swift that can be tested (and fuzzed) on its own.
public indirect enum ConfigValue: Sendable, Hashable {
    case table([String: ConfigValue])
    case array([ConfigValue])
    case string(String)
    case integer(Int)
    case float(Double)
    case boolean(Bool)
    /// A TOML value tokend never uses (dates and times); only its type name is kept.
    case other(String)

    var typeName: String {
        switch self {
        case .table: "a table"
        case .array: "an array"
        case .string: "a string"
        case .integer: "an integer"
        case .float: "a float"
        case .boolean: "a boolean"
        case .other(let name): "a \(name)"
        }
    }
}

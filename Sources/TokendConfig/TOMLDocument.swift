import TOMLKit

/// Turns TOML text into a `ConfigValue` tree.
public enum TOMLDocument {
    /// - Throws: `ConfigurationError` with the line and column of a syntax error.
    public static func parse(_ text: String, file: String) throws(ConfigurationError) -> ConfigValue {
        let table: TOMLTable
        do {
            table = try TOMLTable(string: text)
        } catch let error as TOMLParseError {
            throw ConfigurationError(
                file: file, key: "", problem: "line \(error.source.begin.line), column \(error.source.begin.column): \(error.description)")
        } catch {
            throw ConfigurationError(file: file, key: "", problem: "not valid TOML: \(error)")
        }
        return convert(table)
    }

    static func convert(_ table: TOMLTable) -> ConfigValue {
        var members: [String: ConfigValue] = [:]
        for key in table.keys {
            if let value = table[key] { members[key] = convert(value) }
        }
        return .table(members)
    }

    static func convert(_ value: any TOMLValueConvertible) -> ConfigValue {
        switch value.type {
        case .table: return value.table.map(convert) ?? .other("table")
        case .array: return .array(value.array.map { $0.map(convert) } ?? [])
        case .string: return .string(value.string ?? "")
        case .int: return .integer(value.int ?? 0)
        case .double: return .float(value.double ?? 0)
        case .bool: return .boolean(value.bool ?? false)
        case .date, .time, .dateTime: return .other(value.type.description)
        }
    }
}

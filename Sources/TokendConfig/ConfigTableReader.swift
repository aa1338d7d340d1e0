import TokendCore

/// Typed, path-aware access to one table of the configuration. Every key read is remembered,
/// so `finish()` can reject keys nobody asked for: a misspelt key is an error, not a silently
/// ignored setting.
struct ConfigTableReader {
    let file: String
    let path: String
    let members: [String: ConfigValue]
    private(set) var consumed: Set<String> = []

    init(file: String, path: String, value: ConfigValue?) throws(ConfigurationError) {
        self.file = file
        self.path = path
        switch value {
        case nil: self.members = [:]
        case .table(let members)?: self.members = members
        case let other?: throw ConfigurationError(file: file, key: path, problem: "expected a table, found \(other.typeName)")
        }
    }

    func keyPath(_ key: String) -> String { path.isEmpty ? key : "\(path).\(key)" }

    func error(_ key: String, _ problem: String) -> ConfigurationError {
        ConfigurationError(file: file, key: keyPath(key), problem: problem)
    }

    mutating func raw(_ key: String) -> ConfigValue? {
        consumed.insert(key)
        return members[key]
    }

    mutating func string(_ key: String) throws(ConfigurationError) -> String? {
        switch raw(key) {
        case nil: return nil
        case .string(let s)?: return s
        case let other?: throw error(key, "expected a string, found \(other.typeName)")
        }
    }

    mutating func requiredString(_ key: String) throws(ConfigurationError) -> String {
        guard let value = try string(key) else { throw error(key, "is required") }
        guard !value.isEmpty else { throw error(key, "must not be empty") }
        return value
    }

    mutating func integer(_ key: String, in range: ClosedRange<Int>) throws(ConfigurationError) -> Int? {
        switch raw(key) {
        case nil: return nil
        case .integer(let i)?:
            guard range.contains(i) else { throw error(key, "\(i) is out of range (\(range.lowerBound)…\(range.upperBound))") }
            return i
        case let other?: throw error(key, "expected an integer, found \(other.typeName)")
        }
    }

    mutating func fraction(_ key: String) throws(ConfigurationError) -> Double? {
        switch raw(key) {
        case nil: return nil
        case .float(let d)?:
            guard d > 0, d < 1 else { throw error(key, "\(d) must be between 0 and 1") }
            return d
        case let other?: throw error(key, "expected a number between 0 and 1, found \(other.typeName)")
        }
    }

    mutating func boolean(_ key: String) throws(ConfigurationError) -> Bool? {
        switch raw(key) {
        case nil: return nil
        case .boolean(let b)?: return b
        case let other?: throw error(key, "expected true or false, found \(other.typeName)")
        }
    }

    /// An array of uids (integers 0…4294967294).
    mutating func uidArray(_ key: String) throws(ConfigurationError) -> [UInt32]? {
        switch raw(key) {
        case nil: return nil
        case .array(let elements)?:
            var uids: [UInt32] = []
            for element in elements {
                guard case .integer(let i) = element, let uid = UInt32(exactly: i), uid != UInt32.max else {
                    throw error(key, "expected an array of uids (integers), found an element that is \(element.typeName)")
                }
                uids.append(uid)
            }
            return uids
        case let other?: throw error(key, "expected an array of uids (integers), found \(other.typeName)")
        }
    }

    mutating func stringArray(_ key: String) throws(ConfigurationError) -> [String]? {
        switch raw(key) {
        case nil: return nil
        case .array(let elements)?:
            var strings: [String] = []
            for element in elements {
                guard case .string(let s) = element else {
                    throw error(key, "expected an array of strings, found an element that is \(element.typeName)")
                }
                strings.append(s)
            }
            return strings
        case let other?: throw error(key, "expected an array of strings, found \(other.typeName)")
        }
    }

    mutating func duration(_ key: String) throws(ConfigurationError) -> Duration? {
        guard let text = try string(key) else { return nil }
        do {
            let duration = try DurationFormat.parse(text)
            guard duration > .zero else { throw error(key, "must be longer than zero") }
            return duration
        } catch let parseError as DurationFormat.ParseError {
            throw error(key, parseError.description)
        } catch {
            throw error as! ConfigurationError
        }
    }

    /// The names of sub-tables, for sections like `[providers.NAME]`.
    func tableNames() -> [String] { members.keys.sorted() }

    /// Rejects keys that were never read.
    func finish() throws(ConfigurationError) {
        if let unknown = members.keys.sorted().first(where: { !consumed.contains($0) }) {
            throw error(unknown, "unknown key")
        }
    }
}

/// Reads and writes durations in the configuration's notation: a sequence of number–unit pairs
/// such as `30d`, `12h`, `1h30m`, `90s`, `250ms` (units `d`, `h`, `m`, `s`, `ms`).
public enum DurationFormat {
    public struct ParseError: Error, Sendable, Hashable, CustomStringConvertible {
        public var input: String
        public var description: String {
            "\"\(input)\" is not a duration (write e.g. \"30d\", \"12h\", \"1h30m\", \"90s\" or \"250ms\")"
        }
    }

    /// Parses `text`; throws for anything else, including an empty string and a bare number.
    public static func parse(_ text: String) throws(ParseError) -> Duration {
        let bytes = Array(text.utf8)
        guard !bytes.isEmpty else { throw ParseError(input: text) }
        var index = 0
        var totalMilliseconds: Int64 = 0
        while index < bytes.count {
            var number: Int64 = 0
            let start = index
            while index < bytes.count, bytes[index] >= UInt8(ascii: "0"), bytes[index] <= UInt8(ascii: "9") {
                let (times10, o1) = number.multipliedReportingOverflow(by: 10)
                let (sum, o2) = times10.addingReportingOverflow(Int64(bytes[index] - UInt8(ascii: "0")))
                guard !o1, !o2 else { throw ParseError(input: text) }
                number = sum
                index += 1
            }
            guard index > start, index < bytes.count else { throw ParseError(input: text) }
            let unitMilliseconds: Int64
            switch bytes[index] {
            case UInt8(ascii: "d"):
                unitMilliseconds = 86_400_000
                index += 1
            case UInt8(ascii: "h"):
                unitMilliseconds = 3_600_000
                index += 1
            case UInt8(ascii: "s"):
                unitMilliseconds = 1000
                index += 1
            case UInt8(ascii: "m"):
                if index + 1 < bytes.count, bytes[index + 1] == UInt8(ascii: "s") {
                    unitMilliseconds = 1
                    index += 2
                } else {
                    unitMilliseconds = 60_000
                    index += 1
                }
            default: throw ParseError(input: text)
            }
            let (part, o1) = number.multipliedReportingOverflow(by: unitMilliseconds)
            let (sum, o2) = totalMilliseconds.addingReportingOverflow(part)
            guard !o1, !o2 else { throw ParseError(input: text) }
            totalMilliseconds = sum
        }
        return .milliseconds(totalMilliseconds)
    }

    /// A short human rendering: `2d 3h`, `5m 10s`, `42s`, `-3s` (the two largest units).
    public static func humanReadable(_ duration: Duration) -> String {
        let ms = duration.milliseconds
        // `-Int64.min` traps; the saturated minimum shows as the saturated maximum.
        if ms < 0 { return "-" + humanReadable(.milliseconds(ms == .min ? .max : -ms)) }
        let seconds = ms / 1000
        if seconds == 0 { return "\(ms)ms" }
        let parts: [(Int64, String)] = [
            (seconds / 86400, "d"), (seconds % 86400 / 3600, "h"), (seconds % 3600 / 60, "m"), (seconds % 60, "s"),
        ]
        guard let first = parts.firstIndex(where: { $0.0 > 0 }) else { return "0s" }
        var text = "\(parts[first].0)\(parts[first].1)"
        if first + 1 < parts.count, parts[first + 1].0 > 0 { text += " \(parts[first + 1].0)\(parts[first + 1].1)" }
        return text
    }
}

import Testing

@testable import TokendCore

struct DurationFormatTests {
    static let validCases: [(String, Duration)] = {
        let day: Int64 = 86400
        var cases: [(String, Duration)] = []
        cases.append(("30d", .seconds(30 * day)))
        cases.append(("12h", .seconds(12 * 3600)))
        cases.append(("1h30m", .seconds(5400)))
        cases.append(("90s", .seconds(90)))
        cases.append(("250ms", .milliseconds(250)))
        cases.append(("1m", .seconds(60)))
        cases.append(("0s", .zero))
        cases.append(("1d2h3m4s5ms", .milliseconds(93_784_005)))
        cases.append(("10m5ms", .milliseconds(600_005)))
        cases.append(("2m3s", .seconds(123)))
        cases.append(("1ms1m", .milliseconds(60_001)))
        cases.append(("007s", .seconds(7)))
        cases.append(("1h1h", .seconds(7200)))
        cases.append(("106751991167d", .seconds(106_751_991_167 * day)))
        return cases
    }()

    @Test(arguments: validCases)
    func parsesValidDurations(text: String, expected: Duration) throws {
        #expect(try DurationFormat.parse(text) == expected)
    }

    @Test(arguments: [
        "", "30", "d", "1x", "-5s", "+5s", "5 s", " 5s", "5s ", "1h30", "1.5h", "h1", "5S", "5D", "5sec", "1m s", "ms", "5mss",
        "9223372036854775808s",  // the number overflows Int64
        "106751991168d",  // the total overflows Int64 milliseconds
        "9223372036854775807ms1ms",  // the sum overflows
        "99999999999999999999999d",
    ])
    func rejectsInvalidDurations(text: String) {
        #expect(throws: DurationFormat.ParseError(input: text)) { try DurationFormat.parse(text) }
    }

    @Test func errorDescriptionQuotesTheInputAndGivesExamples() {
        let error = DurationFormat.ParseError(input: "1x")
        #expect(error.description.hasPrefix("\"1x\" is not a duration"))
        #expect(error.description.contains("30d"))
    }

    static let humanReadableCases: [(Duration, String)] = {
        let minute: Int64 = 60
        let hour: Int64 = 3600
        let day: Int64 = 86400
        var cases: [(Duration, String)] = []
        cases.append((.zero, "0ms"))
        cases.append((.milliseconds(250), "250ms"))
        cases.append((.milliseconds(999), "999ms"))
        cases.append((.seconds(1), "1s"))
        cases.append((.milliseconds(1500), "1s"))
        cases.append((.seconds(42), "42s"))
        cases.append((.seconds(90), "1m 30s"))
        cases.append((.seconds(5 * minute + 10), "5m 10s"))
        cases.append((.seconds(hour), "1h"))
        cases.append((.seconds(hour + 30 * minute), "1h 30m"))
        cases.append((.seconds(hour + 1), "1h"))
        cases.append((.seconds(day), "1d"))
        cases.append((.seconds(2 * day + 3 * hour), "2d 3h"))
        cases.append((.seconds(2 * day + 3 * hour + 4 * minute + 5), "2d 3h"))
        cases.append((.seconds(day + minute), "1d"))
        cases.append((.seconds(30 * day), "30d"))
        cases.append((.seconds(-3), "-3s"))
        cases.append((.seconds(-(hour + 30 * minute)), "-1h 30m"))
        cases.append((.milliseconds(-250), "-250ms"))
        return cases
    }()

    @Test(arguments: humanReadableCases)
    func humanReadable(duration: Duration, expected: String) {
        #expect(DurationFormat.humanReadable(duration) == expected)
    }

    @Test func humanReadableSurvivesExtremes() {
        // Durations beyond Int64 milliseconds saturate; the most negative one must not trap on negation.
        #expect(DurationFormat.humanReadable(.seconds(Int64.max)).hasSuffix("d 7h"))
        #expect(DurationFormat.humanReadable(.milliseconds(Int64.min)).hasPrefix("-106751991167d"))
        #expect(DurationFormat.humanReadable(.seconds(Int64.min)).hasPrefix("-"))
    }

    @Test(arguments: ["30d", "12h", "1h 30m", "90s", "250ms", "2d 3h"])
    func humanReadableOfParsedDurationIsConsistent(text: String) throws {
        // humanReadable writes a space between units; without it the text parses back.
        let parsed = try DurationFormat.parse(text.replacingOccurrences(of: " ", with: ""))
        #expect(DurationFormat.humanReadable(parsed) == (text == "90s" ? "1m 30s" : text))
    }
}

extension String {
    fileprivate func replacingOccurrences(of target: String, with replacement: String) -> String {
        split(separator: Character(target), omittingEmptySubsequences: false).joined(separator: replacement)
    }
}

import Testing

@testable import TokendConfig

/// `message_timeout`: the slowloris limit (issue 8, point 4).
struct MessageTimeoutConfigTests {
    @Test func defaultsToTenSecondsAndIsConfigurable() throws {
        #expect(try parseConfig(exampleConfig).messageTimeout == .seconds(10))
        let configured = exampleConfig.replacingOccurrences(of: "[daemon]\n", with: "[daemon]\nmessage_timeout = \"2500ms\"\n")
        #expect(try parseConfig(configured).messageTimeout == .milliseconds(2500))
    }

    @Test func zeroOrNonsenseIsRefused() {
        for value in ["\"0s\"", "\"soon\"", "5"] {
            let text = exampleConfig.replacingOccurrences(of: "[daemon]\n", with: "[daemon]\nmessage_timeout = \(value)\n")
            #expect(throws: ConfigurationError.self, "\(value)") { try parseConfig(text) }
        }
    }
}

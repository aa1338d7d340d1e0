import Testing
import TokendCore

@testable import TokendConfig

/// `relogin_warning`, `relogin_command`, `relogin_command_timeout` (issue 31).
struct ReloginConfigurationTests {
    @Test func defaultsAreAWeekADayAndAnHour() throws {
        let relogin = try #require(try parseConfig(exampleConfig).providers["example"]?.relogin)
        #expect(relogin.thresholds.map(\.label) == ["7d", "1d", "1h"])
        #expect(relogin.command == nil)
        #expect(relogin.commandTimeout == .seconds(30))
    }

    @Test func configuredValuesAreReadLongestFirst() throws {
        let relogin = try #require(
            try parseConfig(
                config(
                    provider: """
                        relogin_warning = ["10s", "30s"]
                        relogin_command = "hooks/relogin"
                        relogin_command_timeout = "5s"
                        """)
            ).providers["example"]?.relogin)
        #expect(
            relogin.thresholds == [ReloginThreshold(lead: .seconds(30), label: "30s"), ReloginThreshold(lead: .seconds(10), label: "10s")])
        #expect(relogin.command == "/srv/tokend/etc/hooks/relogin")
        #expect(relogin.commandTimeout == .seconds(5))
        let off = try parseConfig(config(provider: "relogin_warning = []")).providers["example"]?.relogin
        #expect(off?.thresholds == [])
    }

    @Test(arguments: [
        ("relogin_warning = [\"soon\"]", "relogin_warning"), ("relogin_warning = [\"0s\"]", "relogin_warning"),
        ("relogin_warning = [\"1h\", \"60m\"]", "relogin_warning"), ("relogin_warning = \"1h\"", "relogin_warning"),
        ("relogin_command = \"\"", "relogin_command"), ("relogin_command_timeout = \"2h\"", "relogin_command_timeout"),
        ("relogin_command_timeout = \"10ms\"", "relogin_command_timeout"),
    ])
    func badValuesGiveOneLineNamingTheKey(line: String, key: String) throws {
        let error = try #require(configError(config(provider: line)))
        #expect(error.description.contains("providers.example.\(key)"))
        #expect(!error.description.contains("\n"))
    }
}

import Foundation
import Testing
import TokendTestSupport

/// `config/tokend.rules.yml`, the Prometheus alerting rules shipped as
/// `/usr/share/doc/tokend/examples/tokend.rules.yml`: checked by `promtool check rules` where
/// Debian's `prometheus` package is installed, and read here in any case.
struct ReloginRulesFileTests {
    static let path = ConfigurationReferenceTests.repositoryRoot.appendingPathComponent("config/tokend.rules.yml").path
    static let metric = "tokend_credential_relogin_deadline_seconds"

    /// The alerts of the file: `name → expr`, read by indentation (the file's own layout:
    /// `groups:` / `- name:` / `rules:` / `- alert:` with `expr:` under it).
    static func alerts(_ text: String) throws -> [String: String] {
        var alerts: [String: String] = [:]
        var current: String?
        var sawGroups = false
        for raw in text.split(separator: "\n", omittingEmptySubsequences: false) {
            let line = raw.trimmingCharacters(in: .whitespaces)
            if line.isEmpty || line.hasPrefix("#") { continue }
            #expect(!raw.contains("\t"), "tabs are not YAML indentation: \(raw)")
            if raw.hasPrefix("groups:") { sawGroups = true }
            if line.hasPrefix("- alert: ") {
                current = String(line.dropFirst("- alert: ".count))
            } else if line.hasPrefix("expr: "), let name = current {
                alerts[name] = String(line.dropFirst("expr: ".count))
            }
        }
        guard sawGroups else { throw ChildProcess.Failure(description: "no top-level groups: in \(path)") }
        return alerts
    }

    @Test func everyAlertWatchesTheReloginGaugeAheadOfTheDate() throws {
        let alerts = try Self.alerts(try String(contentsOfFile: Self.path, encoding: .utf8))
        #expect(alerts.keys.sorted() == ["TokendReloginWithinADay", "TokendReloginWithinAWeek", "TokendReloginWithinAnHour"])
        for (name, expr) in alerts {
            // -1 means no date ahead: it must not fire.
            #expect(expr.contains("\(Self.metric) >= 0"), "\(name): \(expr)")
            #expect(expr.contains("\(Self.metric) < "), "\(name): \(expr)")
        }
    }

    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/promtool"), "needs Debian's prometheus package"))
    func promtoolAcceptsIt() async throws {
        let result = try await ChildProcess.run("/usr/bin/promtool", ["check", "rules", Self.path], timeout: .seconds(60))
        #expect(result.status == 0, "\(result.stdout) \(result.stderr)")
        #expect(result.stdout.contains("SUCCESS: 3 rules found"), "\(result.stdout)")
    }
}

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
            // -1 means no date ahead: it must not fire. Only the provider's series (without a
            // credential label), which tokend always exports.
            let series = Self.metric + #"{credential=""}"#
            #expect(expr.contains("\(series) >= 0"), "\(name): \(expr)")
            #expect(expr.contains("\(series) < "), "\(name): \(expr)")
        }
    }

    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/promtool"), "needs Debian's prometheus package"))
    func promtoolAcceptsIt() async throws {
        let result = try await ChildProcess.run("/usr/bin/promtool", ["check", "rules", Self.path], timeout: .seconds(60))
        #expect(result.status == 0, "\(result.stdout) \(result.stderr)")
        #expect(result.stdout.contains("SUCCESS: 3 rules found"), "\(result.stdout)")
    }

    /// `promtool test rules` on series as tokend exports them: the provider's gauge, and with
    /// `per_credential_labels = true` one per credential beside it. Each alert fires once per
    /// provider and host, whether per-credential gauges are exported or not.
    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/promtool"), "needs Debian's prometheus package"))
    func eachAlertFiresOncePerProviderWithOrWithoutPerCredentialGauges() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("tokend-rules-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let testFile = directory.appendingPathComponent("tokend.rules.test.yml").path
        func annotations(_ summary: String) -> String {
            """
            exp_annotations:
                          summary: "A tokend credential of example \(summary)"
                          description: "Run tokenctl status on h1 to see which (RELOGIN BY), then tokenctl login USER."
            """
        }
        let test = """
            rule_files:
              - \(Self.path)
            evaluation_interval: 1m
            tests:
              - interval: 1m
                input_series:
                  - series: '\(Self.metric){instance="h1",provider="example"}'
                    values: '1800x30'
                  - series: '\(Self.metric){instance="h1",provider="example",credential="alice"}'
                    values: '1800x30'
                  - series: '\(Self.metric){instance="h1",provider="example",credential="bob"}'
                    values: '3000x30'
                  - series: '\(Self.metric){instance="h1",provider="other"}'
                    values: '-1x30'
                alert_rule_test:
                  - eval_time: 20m
                    alertname: TokendReloginWithinAnHour
                    exp_alerts:
                      - exp_labels: {severity: critical, instance: h1, provider: example}
                        \(annotations("stops working within the hour"))
                  - eval_time: 20m
                    alertname: TokendReloginWithinADay
                    exp_alerts:
                      - exp_labels: {severity: warning, instance: h1, provider: example}
                        \(annotations("needs a new login within a day"))
                  - eval_time: 20m
                    alertname: TokendReloginWithinAWeek
                    exp_alerts:
                      - exp_labels: {severity: info, instance: h1, provider: example}
                        \(annotations("needs a new login within a week"))
            """
        try test.write(toFile: testFile, atomically: true, encoding: .utf8)
        let result = try await ChildProcess.run("/usr/bin/promtool", ["test", "rules", testFile], timeout: .seconds(60))
        #expect(result.status == 0, "\(result.stdout) \(result.stderr)")
    }
}

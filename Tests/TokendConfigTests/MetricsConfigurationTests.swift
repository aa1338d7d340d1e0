import Testing
import TokendCore

@testable import TokendConfig

struct MetricsConfigurationTests {
    @Test func metricsAreOffByDefault() throws {
        let configuration = try parseConfig("")
        #expect(!configuration.metrics.isEnabled)
        #expect(configuration.shutdownTimeout == .seconds(10))
    }

    @Test func parsesTheMetricsSectionAndTheShutdownTimeout() throws {
        let configuration = try parseConfig(
            """
            [daemon]
            shutdown_timeout = "3s"

            [metrics]
            listen = "127.0.0.1:9464"
            textfile = "../node_exporter/tokend.prom"
            textfile_interval = "15s"
            """)
        #expect(configuration.shutdownTimeout == .seconds(3))
        #expect(configuration.metrics.listen == .tcp(host: "127.0.0.1", port: 9464))
        #expect(configuration.metrics.textfile == "/srv/tokend/node_exporter/tokend.prom")
        #expect(configuration.metrics.textfileInterval == .seconds(15))
    }

    @Test(arguments: [
        ("127.0.0.1:9464", MetricsConfiguration.Listen.tcp(host: "127.0.0.1", port: 9464)),
        ("127.1.2.3:1", .tcp(host: "127.1.2.3", port: 1)),
        ("localhost:9464", .tcp(host: "127.0.0.1", port: 9464)),
        ("[::1]:9464", .tcp(host: "::1", port: 9464)),
        ("unix:/run/tokend/metrics.sock", .unix(path: "/run/tokend/metrics.sock")),
        ("unix:metrics.sock", .unix(path: "/srv/tokend/etc/metrics.sock")),
    ])
    func acceptsLoopbackAndUnixAddresses(text: String, expected: MetricsConfiguration.Listen) throws {
        #expect(try parseConfig("[metrics]\nlisten = \"\(text)\"").metrics.listen == expected)
    }

    @Test(arguments: [
        ("0.0.0.0:9464", "not a loopback address"),
        ("192.168.1.10:9464", "not a loopback address"),
        ("[::]:9464", "not a loopback address"),
        ("127.0.0.1", "is not HOST:PORT"),
        ("127.0.0.1:0", "is not a port number"),
        ("127.0.0.1:70000", "is not a port number"),
        ("unix:", "no socket path"),
    ])
    func rejectsOtherAddresses(text: String, problem: String) {
        #expect {
            try parseConfig("[metrics]\nlisten = \"\(text)\"")
        } throws: { error in
            guard let error = error as? ConfigurationError else { return false }
            return error.key == "metrics.listen" && error.problem.contains(problem)
        }
    }

    @Test func rejectsUnknownMetricsKeys() {
        #expect(throws: ConfigurationError.self) { try parseConfig("[metrics]\nport = 9464") }
    }
}

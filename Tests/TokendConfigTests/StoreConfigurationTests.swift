import Testing
import TokendCore

@testable import TokendConfig

/// `[store]` and `daemon.node_name`.
@Suite struct StoreConfigurationTests {
    @Test func sqliteIsTheDefault() throws {
        let configuration = try parseConfig(exampleConfig)
        #expect(configuration.store == .sqlite)
        #expect(configuration.nodeName == nil)
    }

    @Test func readsThePostgresStore() throws {
        let text =
            exampleConfig.replacingOccurrences(of: "[daemon]\n", with: "[daemon]\nnode_name = \"worker-3\"\n") + """
                [store]
                kind = "postgresql"
                url = "postgresql://tokend@127.0.0.1:5432/tokend"
                password_file = "pg-password"
                lease = "20s"
                reconcile_interval = "5s"
                """
        let configuration = try parseConfig(
            text,
            secrets: [
                "/srv/tokend/etc/example-client-secret": "s3cret\n", "/srv/tokend/etc/pg-password": "db-pass\n",
            ])
        #expect(configuration.nodeName == "worker-3")
        guard case .postgresql(let store) = configuration.store else {
            Issue.record("not a postgresql store")
            return
        }
        #expect(store.url == "postgresql://tokend@127.0.0.1:5432/tokend")
        #expect(store.password?.value == "db-pass")
        #expect(store.lease == .seconds(20))
        #expect(store.reconcileInterval == .seconds(5))
        #expect(store.tls == .prefer)
    }

    @Test func verifyFullNamesTheCAFileRelativeToTheConfiguration() throws {
        let configuration = try parseConfig(
            exampleConfig + """
                [store]
                kind = "postgresql"
                url = "postgresql://tokend@db.internal/tokend"
                tls = "verify-full"
                tls_ca_file = "db-ca.pem"
                """)
        guard case .postgresql(let store) = configuration.store else {
            Issue.record("not a postgresql store")
            return
        }
        #expect(store.tls == .verifyFull(caFile: "/srv/tokend/etc/db-ca.pem"))
    }

    @Test(arguments: [
        ("kind = \"mysql\"", "unknown store kind"),
        ("kind = \"postgresql\"", "url"),
        ("kind = \"postgresql\"\nurl = \"http://x/y\"", "postgresql://"),
        ("kind = \"postgresql\"\nurl = \"postgresql://u:pw@h/d\"", "password_file"),
        ("kind = \"postgresql\"\nurl = \"postgresql://u@h/d\"\nlease = \"2s\"", "http_timeout"),
        ("kind = \"postgresql\"\nurl = \"postgresql://u@h/d\"\nlease = \"2h\"", "between"),
        ("kind = \"postgresql\"\nurl = \"postgresql://u@h/d\"\npassword_file = \"missing\"", "cannot read"),
        ("kind = \"postgresql\"\nurl = \"postgresql://u@h/d\"\nleese = \"30s\"", "leese"),
        ("kind = \"postgresql\"\nurl = \"postgresql://u@h/d\"\ntls = \"verify-full\"", "tls_ca_file"),
        ("kind = \"postgresql\"\nurl = \"postgresql://u@h/d\"\ntls = \"require\"", "tls"),
        ("kind = \"postgresql\"\nurl = \"postgresql://u@h/d\"\ntls_ca_file = \"ca.pem\"", "tls_ca_file"),
    ])
    func refusesBadStores(_ body: String, _ expected: String) {
        do {
            _ = try parseConfig(exampleConfig + "[store]\n" + body + "\n")
            Issue.record("accepted: \(body)")
        } catch {
            #expect(error.description.contains(expected), "\(error.description)")
            #expect(!error.description.contains(":pw@") || expected == "password_file")
        }
    }

    @Test(arguments: ["", "two words", "a/b", "node-\u{e9}", String(repeating: "x", count: 65)])
    func refusesBadNodeNames(_ name: String) {
        #expect(throws: ConfigurationError.self) {
            try parseConfig(exampleConfig.replacingOccurrences(of: "[daemon]\n", with: "[daemon]\nnode_name = \"\(name)\"\n"))
        }
    }
}

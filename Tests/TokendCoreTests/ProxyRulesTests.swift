import Testing

@testable import TokendCore

/// Proxy URLs, the environment's variables and which requests go through a proxy (curl's
/// rules, without `http_proxy`: tokend speaks cleartext HTTP to loopback only).
struct ProxyRulesTests {
    @Test(arguments: [
        ("http://proxy.corp:3128", "proxy.corp", 3128),
        ("proxy.corp:8080", "proxy.corp", 8080),
        ("http://PROXY.corp", "proxy.corp", 1080),
        ("http://[fd00::1]:3128/", "fd00::1", 3128),
        ("  http://10.0.0.1:3128  ", "10.0.0.1", 3128),
    ])
    func proxyURLs(text: String, host: String, port: Int) throws {
        let server = try ProxyServer.parse(text, allowCredentials: false)
        #expect(server.host == host && server.port == port && server.credentials == nil)
    }

    @Test(arguments: [
        ("https://proxy:3128", "only http:// proxies are supported (tokend tunnels through them with CONNECT)"),
        ("socks5://proxy:1080", "only http:// proxies are supported (tokend tunnels through them with CONNECT)"),
        ("http://proxy:notaport", "the port is not a number"),
        ("http://proxy:70000", "the port 70000 is out of range"),
        ("http://:3128", "has no host"),
        ("http://proxy:3128/path", "a proxy URL has no path"),
        ("http://user:pw@proxy:3128", "has a user name or password in it; put them in proxy_credentials_file instead"),
    ])
    func badProxyURLs(text: String, problem: String) {
        #expect(throws: ProxyProblem(problem)) { try ProxyServer.parse(text, allowCredentials: false) }
    }

    @Test func credentialsFromTheEnvironmentAreKeptButNeverShown() throws {
        let environment = try ProxyEnvironment(environment: ["HTTPS_PROXY": "http://alice:p%40ss@proxy.corp:3128"])
        let proxy = try #require(environment.httpsProxy)
        #expect(proxy.credentials?.value == "alice:p@ss")
        #expect(proxy.description == "http://proxy.corp:3128")
        #expect(!"\(proxy)".contains("p@ss") && !"\(environment)".contains("p@ss"))
    }

    @Test func theLowerCaseVariableWins() throws {
        let environment = try ProxyEnvironment(environment: [
            "https_proxy": "http://lower:1", "HTTPS_PROXY": "http://upper:2", "no_proxy": "a.example", "NO_PROXY": "b.example",
        ])
        #expect(environment.httpsProxy?.host == "lower")
        #expect(environment.noProxy == ["a.example"])
    }

    @Test func aBadVariableIsNamed() {
        #expect(throws: ProxyProblem("HTTPS_PROXY: only http:// proxies are supported (tokend tunnels through them with CONNECT)")) {
            try ProxyEnvironment(environment: ["HTTPS_PROXY": "https://proxy:443"])
        }
    }

    @Test func httpProxyDoesNotApply() throws {
        let environment = try ProxyEnvironment(environment: ["http_proxy": "http://proxy:3128"])
        #expect(environment.httpsProxy == nil)
    }

    @Test(arguments: [
        ("idp.example.com", true), ("login.idp.example.com", true), ("badidp.example.com", false), ("example.com", false),
        ("10.1.2.3", true), ("10.1.2.30", false), ("LOCALHOST", true), ("::1", true), ("other.test", false),
    ])
    func noProxy(host: String, bypassed: Bool) throws {
        let environment = try ProxyEnvironment(environment: [
            "https_proxy": "http://proxy:3128", "no_proxy": " .idp.example.com, 10.1.2.3:443,localhost,[::1]",
        ])
        #expect(environment.bypasses(host) == bypassed)
        let route = environment.route(scheme: "https", host: host, setting: .environment)
        #expect((route == nil) == bypassed)
    }

    @Test func aStarBypassesEverything() throws {
        let environment = try ProxyEnvironment(environment: ["https_proxy": "http://proxy:3128", "no_proxy": "*"])
        #expect(environment.route(scheme: "https", host: "idp.example", setting: .environment) == nil)
    }

    /// A provider's own setting wins over the environment; cleartext always goes direct.
    @Test func theProviderSettingWins() throws {
        let environment = try ProxyEnvironment(environment: ["https_proxy": "http://env:3128", "no_proxy": "idp.example"])
        let own = ProxyServer(host: "own", port: 8080)
        #expect(environment.route(scheme: "https", host: "other.example", setting: .direct) == nil)
        #expect(environment.route(scheme: "https", host: "idp.example", setting: .server(own)) == own)
        #expect(environment.route(scheme: "https", host: "other.example", setting: .environment)?.host == "env")
        #expect(environment.route(scheme: "http", host: "other.example", setting: .server(own)) == nil)
    }
}

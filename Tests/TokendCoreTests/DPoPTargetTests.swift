import Testing

@testable import TokendCore

/// What a program may ask a DPoP proof for (RFC 9449 §4.2), and the `htu` it gets.
struct DPoPTargetTests {
    @Test(arguments: [
        ("GET", "https://api.example/items?page=2#top", "https://api.example/items"),
        ("POST", "https://api.example", "https://api.example/"),
        ("DELETE", "https://api.example:8443/a/b/", "https://api.example:8443/a/b/"),
        ("GET", "http://127.0.0.1:8080/x", "http://127.0.0.1:8080/x"),
        ("PATCH", "http://localhost/", "http://localhost/"),
        ("M-SEARCH", "https://[::1]:9/q?x#y", "https://[::1]:9/q"),
        ("GET", "HTTPS://API.Example.COM:443/Items/X", "https://api.example.com/Items/X"),
        ("GET", "http://LOCALHOST:80", "http://localhost/"),
    ])
    func accepted(method: String, uri: String, htu: String) throws {
        let target = try DPoPTarget(method: method, uri: uri)
        #expect(target.method == method && target.uri == htu)
    }

    @Test(arguments: [
        ("", "https://a.example/", "httpMethod"),
        ("GE T", "https://a.example/", "httpMethod"),
        ("GET\n", "https://a.example/", "httpMethod"),
        (String(repeating: "G", count: 33), "https://a.example/", "httpMethod"),
        ("GET", "ftp://a.example/", "httpUri"),
        ("GET", "/relative", "httpUri"),
        ("GET", "https://", "httpUri"),
        ("GET", "https://user:pw@a.example/", "httpUri"),
        ("GET", "http://a.example/", "httpUri"),
        ("GET", "https://a.example/ x", "httpUri"),
        ("GET", "https://a.example/é", "httpUri"),
        ("GET", "https://a.example/" + String(repeating: "a", count: 2048), "httpUri"),
    ])
    func refused(method: String, uri: String, parameter: String) {
        #expect(throws: DPoPTarget.Problem.self) { try DPoPTarget(method: method, uri: uri) }
        do {
            _ = try DPoPTarget(method: method, uri: uri)
        } catch {
            #expect(error.parameter == parameter, "\(method) \(uri): \(error.description)")
        }
    }

    @Test(arguments: [("n-1", true), ("", false), ("with space", false), ("q\"", false), ("b\\s", false), ("é", false)])
    func nonces(nonce: String, valid: Bool) {
        #expect(DPoPNonce.isValid(nonce) == valid)
        #expect(!DPoPNonce.isValid(String(repeating: "n", count: 513)))
    }
}

import Testing
import TokenctlSupport
import TokendClient

struct LoopbackRedirectTests {
    let rule = LoopbackRedirect(path: "/callback", state: "S1")

    func head(_ line: String) -> String { line + "\r\nHost: 127.0.0.1\r\n\r\n" }

    @Test func theRedirectWithItsState() {
        #expect(rule.judge(head: head("GET /callback?code=c&state=S1 HTTP/1.1")) == .redirect(target: "/callback?code=c&state=S1"))
    }

    @Test func strayRequestsAreIgnoredForeignStatesRejected() {
        #expect(rule.judge(head: head("GET /favicon.ico HTTP/1.1")) == .ignore(status: 404))
        #expect(rule.judge(head: head("POST /callback?state=S1 HTTP/1.1")) == .ignore(status: 405))
        #expect(rule.judge(head: "garbage") == .ignore(status: 400))
        guard case .reject = rule.judge(head: head("GET /callback?code=c&state=S2 HTTP/1.1")) else {
            Issue.record()
            return
        }
        guard case .reject = rule.judge(head: head("GET /callback?code=c&state=S1&state=S1 HTTP/1.1")) else {
            Issue.record()
            return
        }
        guard case .reject = rule.judge(head: head("GET /callback?code=c HTTP/1.1")) else {
            Issue.record()
            return
        }
    }

    @Test func aHATFallbackOnTheSameListenerEndsTheLogin() {
        let hat = LoopbackRedirect(path: "/hat/ok", fallbackPath: "/hat/no")
        #expect(hat.judge(head: head("GET /hat/no?error=x HTTP/1.1")) == .redirect(target: "/hat/no?error=x"))
        #expect(hat.judge(head: head("GET /hat/ok?token=T HTTP/1.1")) == .redirect(target: "/hat/ok?token=T"))
    }

    @Test func loopbackURLs() {
        #expect(LoopbackRedirect.loopback("http://127.0.0.1:8123/callback?x=1")! == (8123, "/callback"))
        #expect(LoopbackRedirect.loopback("http://localhost:80")! == (80, "/"))
        #expect(LoopbackRedirect.loopback("https://127.0.0.1:8123/callback") == nil)
        #expect(LoopbackRedirect.loopback("http://127.0.0.1:99999/") == nil)
        #expect(LoopbackRedirect.loopback("http://127.0.0.1.evil.example:80/") == nil)
        #expect(LoopbackRedirect.queryValues("state", in: "https://i/a?x=1&state=a%2Bb&y") == ["a+b"])
    }
}

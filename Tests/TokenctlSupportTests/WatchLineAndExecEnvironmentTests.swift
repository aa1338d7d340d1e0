import Testing
import TokenctlSupport
import TokendClient

struct WatchLineTests {
    static let credentials = Credentials(
        userIdentifier: "alice",
        accessToken: "secret-token",
        tokenType: "Bearer",
        expiresAt: 1_738_328_398
    )

    @Test func showsTheTimeAndExpiryButNotTheToken() {
        let line = WatchLine.render(Self.credentials, now: 1_738_324_800)
        #expect(line == "2025-01-31T12:00:00Z alice expires in 59m 58s (at 2025-01-31T12:59:58Z)")
        #expect(!line.contains("secret-token"))
    }

    @Test func showsTheTokenOnlyWhenAsked() {
        let line = WatchLine.render(Self.credentials, now: 1_738_324_800, showToken: true)
        #expect(line.hasSuffix(" token secret-token"))
        var hostile = Self.credentials
        hostile.accessToken = "a\u{1B}[2Jb"
        hostile.userIdentifier = "x\u{7}y"
        let cleaned = WatchLine.render(hostile, now: 1_738_324_800, showToken: true)
        #expect(!cleaned.contains("\u{1B}") && !cleaned.contains("\u{7}"))
    }

    @Test(arguments: [
        (Int64(0), "1970-01-01T00:00:00Z"),
        (Int64(951_782_400), "2000-02-29T00:00:00Z"),
        (Int64(4_102_444_799), "2099-12-31T23:59:59Z"),
    ])
    func timestampsAreUTC(seconds: Int64, expected: String) {
        #expect(WatchLine.timestamp(seconds) == expected)
    }

    @Test func anExpiredTokenSaysSo() {
        #expect(WatchLine.render(Self.credentials, now: 1_738_330_000).contains("expires in expired"))
    }
}

struct ExecEnvironmentTests {
    @Test(arguments: ["ACCESS_TOKEN", "_x", "GITHUB_TOKEN2", "a"])
    func acceptsVariableNames(name: String) {
        #expect(ExecEnvironment.isValidName(name))
    }

    @Test(arguments: ["", "1X", "A-B", "A B", "A=B", "Ä", String(repeating: "A", count: 256)])
    func refusesOthers(name: String) {
        #expect(!ExecEnvironment.isValidName(name))
    }

    @Test func replacesTheVariableAndKeepsTheRest() {
        let environment = ["PATH=/usr/bin", "ACCESS_TOKEN=stale", "ACCESS_TOKEN_URL=x", "HOME=/root"]
        #expect(
            ExecEnvironment.environment(environment, setting: "ACCESS_TOKEN", to: "fresh")
                == ["PATH=/usr/bin", "ACCESS_TOKEN_URL=x", "HOME=/root", "ACCESS_TOKEN=fresh"]
        )
    }
}

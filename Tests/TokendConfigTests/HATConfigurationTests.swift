import Testing
import TokendCore

@testable import TokendConfig

/// A configuration with one `hat` provider named `pda`, plus `extra` lines in its table.
private func hatConfig(_ extra: String = "", address: String = "postman.hubat.net") -> String {
    """
    [providers.pda]
    kind = "hat"
    address = "\(address)"
    application = "tokend-test"
    redirect = "http://127.0.0.1:8700/hat/success"
    fallback = "http://127.0.0.1:8700/hat/failure"
    \(extra)
    """
}

private func hatSettings(_ configuration: DaemonConfiguration) -> HATSettings? {
    guard case .hat(let settings)? = configuration.providers["pda"]?.kind else { return nil }
    return settings
}

struct HATConfigurationTests {
    @Test func defaultsComeFromTheHATServer() throws {
        let configuration = try parseConfig(hatConfig())
        let settings = try #require(hatSettings(configuration))
        #expect(settings.address == "postman.hubat.net")
        #expect(settings.application == "tokend-test")
        #expect(settings.redirect == "http://127.0.0.1:8700/hat/success")
        #expect(settings.fallback == "http://127.0.0.1:8700/hat/failure")
        #expect(settings.scheme == "https")
        #expect(settings.publicKeyURL == "https://postman.hubat.net/publickey")
        #expect(settings.renewalURL == "https://postman.hubat.net/users/access_token/validate")
        #expect(settings.renewalHeader == "X-Auth-Token")
        #expect(settings.idleLimit == .seconds(3 * 86400))
        #expect(settings.renewalInterval == .seconds(86400))
        #expect(settings.caFile == nil)
        #expect(settings.keyRefetchInterval == .seconds(60))
    }

    @Test func policyFollowsThePDARules() throws {
        let configuration = try parseConfig(hatConfig())
        let policy = try #require(configuration.providers["pda"]).refreshPolicy
        #expect(policy.maxSessionAge == .seconds(30 * 86400))
        #expect(policy.sessionWarningLead == .seconds(3 * 86400))
        // Never served past the idle limit; renewed a third of the way into it.
        #expect(policy.maxTokenAge == .seconds(3 * 86400))
        #expect(abs(policy.refreshAtFraction - 1.0 / 3) < 1e-9)
        #expect(policy.expiryEndsSession)
    }

    @Test func everyHATSettingCanBeChanged() throws {
        let configuration = try parseConfig(
            hatConfig(
                """
                scheme = "http"
                ca_file = "pda-ca.pem"
                public_key_path = "/api/publickey"
                renewal_path = "/api/v2.6/ping"
                renewal_header = "X-Other-Token"
                idle_limit = "6s"
                renewal_interval = "2s"
                max_session_age = "20s"
                session_warning = "5s"
                refresh_at = 0.5
                key_refetch_interval = "1s"
                """, address: "127.0.0.1:4567"))
        let settings = try #require(hatSettings(configuration))
        #expect(settings.origin == "http://127.0.0.1:4567")
        #expect(settings.caFile == "/srv/tokend/etc/pda-ca.pem")
        #expect(settings.publicKeyURL == "http://127.0.0.1:4567/api/publickey")
        #expect(settings.renewalURL == "http://127.0.0.1:4567/api/v2.6/ping")
        #expect(settings.renewalHeader == "X-Other-Token")
        #expect(settings.idleLimit == .seconds(6))
        #expect(settings.renewalInterval == .seconds(2))
        #expect(settings.keyRefetchInterval == .seconds(1))
        let policy = try #require(configuration.providers["pda"]).refreshPolicy
        #expect(policy.maxSessionAge == .seconds(20))
        #expect(policy.sessionWarningLead == .seconds(5))
        #expect(policy.maxTokenAge == .seconds(6))
        #expect(policy.refreshAtFraction == 0.5)
    }

    @Test func addressIsLowerCased() throws {
        let settings = try #require(hatSettings(try parseConfig(hatConfig(address: "Postman.HUBAT.net"))))
        #expect(settings.address == "postman.hubat.net")
    }

    @Test func expiryEndsTheSessionOnlyForHAT() throws {
        let configuration = try parseConfig(
            hatConfig() + "\n" + """
                [providers.oauth]
                kind = "oauth2"
                token_endpoint = "https://idp.example/token"
                client_id = "c"
                client_auth = "none"
                """)
        #expect(configuration.providers["oauth"]?.refreshPolicy.expiryEndsSession == false)
        #expect(configuration.providers["oauth"]?.refreshPolicy.maxSessionAge == nil)
    }

    struct BadHAT: Sendable, CustomTestStringConvertible {
        var name: String
        var text: String
        var key: String
        var problem: String
        var testDescription: String { name }
    }

    static let bad: [BadHAT] = [
        BadHAT(
            name: "no address", text: hatConfig().replacingOccurrences("address = \"postman.hubat.net\"", ""), key: "providers.pda.address",
            problem: "is required"),
        BadHAT(
            name: "address with a scheme", text: hatConfig(address: "https://postman.hubat.net"), key: "providers.pda.address",
            problem: "is not a PDA address"),
        BadHAT(
            name: "address with a path", text: hatConfig(address: "postman.hubat.net/x"), key: "providers.pda.address",
            problem: "is not a PDA address"),
        BadHAT(
            name: "http to a remote PDA", text: hatConfig("scheme = \"http\""), key: "providers.pda.scheme", problem: "refusing plain http"),
        BadHAT(name: "another scheme", text: hatConfig("scheme = \"ftp\""), key: "providers.pda.scheme", problem: "is not https"),
        BadHAT(
            name: "no application", text: hatConfig().replacingOccurrences("application = \"tokend-test\"", ""),
            key: "providers.pda.application", problem: "is required"),
        BadHAT(
            name: "application with a space", text: hatConfig().replacingOccurrences("\"tokend-test\"", "\"a b\""),
            key: "providers.pda.application", problem: "printable"),
        BadHAT(
            name: "no redirect", text: hatConfig().replacingOccurrences("redirect = \"http://127.0.0.1:8700/hat/success\"", ""),
            key: "providers.pda.redirect", problem: "is required"),
        BadHAT(
            name: "plain http fallback to a remote host",
            text: hatConfig().replacingOccurrences("http://127.0.0.1:8700/hat/failure", "http://app.example/failed"),
            key: "providers.pda.fallback", problem: "refusing plain http"),
        BadHAT(
            name: "relative public key path", text: hatConfig("public_key_path = \"publickey\""), key: "providers.pda.public_key_path",
            problem: "absolute path"),
        BadHAT(
            name: "header with a colon", text: hatConfig("renewal_header = \"X-Auth-Token:\""), key: "providers.pda.renewal_header",
            problem: "not an HTTP header name"),
        BadHAT(
            name: "renewal not inside the idle limit", text: hatConfig("idle_limit = \"1h\"\nrenewal_interval = \"1h\""),
            key: "providers.pda.renewal_interval", problem: "shorter than idle_limit"),
        BadHAT(name: "an OAuth key", text: hatConfig("client_id = \"x\""), key: "providers.pda.client_id", problem: "unknown key"),
    ]

    @Test(arguments: bad)
    func badHATConfigurationNamesTheKey(bad: BadHAT) throws {
        let error = try #require(configError(bad.text))
        #expect(error.key == bad.key)
        #expect(error.problem.contains(bad.problem), "\(error.problem)")
    }
}

struct HATRefreshPolicyTests {
    private func credential(issuedAt: Int64, expiresAt: Int64, sessionStartedAt: Int64) -> Credential {
        Credential(
            userIdentifier: "alice", provider: "pda", accessToken: SecretString("t"), refreshToken: nil, tokenType: "Bearer",
            scope: nil, expiresAt: Timestamp(secondsSince1970: expiresAt), issuedAt: Timestamp(secondsSince1970: issuedAt),
            sessionStartedAt: Timestamp(secondsSince1970: sessionStartedAt), readers: [],
            enrolment: Enrolment(uid: 0, pid: 0, at: Timestamp(secondsSince1970: 0))
        )
    }

    @Test func renewalComesADayAfterIssueAndNeverAfterTheIdleLimit() throws {
        let policy = try #require(try parseConfig(hatConfig()).providers["pda"]).refreshPolicy
        let day: Int64 = 86400
        // Ten days into a thirty-day login, renewed a moment ago.
        let token = credential(issuedAt: 10 * day, expiresAt: 30 * day, sessionStartedAt: 0)
        #expect(policy.deadline(of: token) == Timestamp(secondsSince1970: 13 * day))
        #expect(policy.sessionEnd(of: token) == Timestamp(secondsSince1970: 30 * day))
        let point = policy.refreshPoint(of: token, jitter: 0)
        #expect(point == Timestamp(secondsSince1970: 11 * day))
        let earliest = policy.refreshPoint(of: token, jitter: 1)
        #expect(earliest < point && earliest > Timestamp(secondsSince1970: 10 * day))
    }

    @Test func anEarlierExpEndsTheSession() throws {
        let policy = try #require(try parseConfig(hatConfig()).providers["pda"]).refreshPolicy
        // A token added mid-login: tokend's session start is later than the PDA's, exp is the PDA's.
        let token = credential(issuedAt: 100, expiresAt: 100 + 5 * 86400, sessionStartedAt: 100)
        #expect(policy.sessionEnd(of: token) == Timestamp(secondsSince1970: 100 + 5 * 86400))
    }
}

extension String {
    fileprivate func replacingOccurrences(_ target: String, _ replacement: String) -> String {
        split(separator: target, omittingEmptySubsequences: false).joined(separator: replacement)
    }
}

import Testing
import TokenctlSupport
import TokendClient
import TokendJSON
import TokendProtocol

struct DurationTextTests {
    @Test(arguments: [
        (Int64(0), "0s"), (1, "1s"), (59, "59s"), (60, "1m"), (61, "1m 1s"), (843, "14m 3s"), (3_600, "1h"),
        (3_661, "1h 1m"), (86_399, "23h 59m"), (86_400, "1d"), (90_061, "1d 1h"), (-75, "-1m 15s"),
        (Int64.min, "-106751991167300d 15h"),
    ])
    func formatsTheTwoLargestUnits(seconds: Int64, expected: String) {
        #expect(DurationText.format(seconds: seconds) == expected)
    }

    @Test func expiresInSaysExpiredOncePassed() {
        #expect(DurationText.expiresIn(1_000 + 843, now: 1_000) == "14m 3s")
        #expect(DurationText.expiresIn(1_000, now: 1_000) == "expired")
        #expect(DurationText.expiresIn(900, now: 1_000) == "expired")
        #expect(DurationText.expiresIn(Int64.max, now: -10) == "never")
    }

    @Test func untilShowsDueAndNothingScheduled() {
        #expect(DurationText.until(nil, now: 1_000) == "-")
        #expect(DurationText.until(1_000, now: 1_000) == "due")
        #expect(DurationText.until(1_030, now: 1_000) == "30s")
    }
}

struct StatusTableTests {
    static let now: Int64 = 1_700_000_000

    @Test func rendersHeaderAndSortedRows() {
        let daemon = DaemonStatus(
            version: "0.1.0",
            startedAt: Self.now - 7_380,
            credentials: 2,
            valid: 1,
            retrying: 1,
            nextRefreshAt: Self.now + 250
        )
        var rows = [
            CredentialStatus(
                userIdentifier: "bob",
                provider: "example",
                state: "retrying",
                expiresAt: Self.now - 5,
                issuedAt: 0,
                sessionStartedAt: 0,
                nextRefreshAt: Self.now + 30,
                lastRefreshAt: Self.now - 302,
                refreshCount: 7,
                lastError: "the IdP answered 503"
            ),
            CredentialStatus(
                userIdentifier: "alice",
                provider: "example",
                state: "valid",
                expiresAt: Self.now + 843,
                issuedAt: 0,
                sessionStartedAt: 0,
                nextRefreshAt: Self.now + 543
            ),
        ]
        rows[1].reloginBy = Self.now + 7 * 86_400 - 3600
        rows[1].reloginReason = "session_end"
        let text = StatusTable.render(daemon: daemon, credentials: rows, now: Self.now)
        #expect(
            text == """
                tokend 0.1.0, up 2h 3m; 2 credentials: 1 valid, 1 retrying; next refresh in 4m 10s

                USER   PROVIDER  STATE     EXPIRES IN  NEXT REFRESH  RELOGIN BY  LAST REFRESH  REFRESHES  LAST ERROR
                alice  example   valid     14m 3s      9m 3s         6d 23h      -             0          -
                bob    example   retrying  expired     30s           -           5m 2s ago     7          the IdP answered 503

                """
        )
    }

    @Test func longAndHostileErrorsAreCleanedAndCut() {
        let error = "\u{1B}[2J" + String(repeating: "x", count: 100)
        let row = CredentialStatus(
            userIdentifier: "alice",
            provider: "p",
            state: "retrying",
            expiresAt: Self.now,
            issuedAt: 0,
            sessionStartedAt: 0,
            lastError: error
        )
        let text = StatusTable.render(daemon: nil, credentials: [row], now: Self.now)
        #expect(!text.contains("\u{1B}"))
        let last = text.split(separator: "\n").last.map(String.init) ?? ""
        #expect(last.hasSuffix("..."))
        #expect(last.split(separator: " ").last.map(\.count) == StatusTable.maximumErrorLength)
    }

    @Test func saysWhenThereAreNoCredentials() {
        #expect(StatusTable.render(daemon: nil, credentials: [], now: Self.now) == "No credentials.\n")
        let daemon = DaemonStatus(version: "1", startedAt: Self.now, credentials: 0)
        #expect(StatusTable.render(daemon: daemon, credentials: [], now: Self.now).hasSuffix("\nNo credentials.\n"))
        let busy = DaemonStatus(version: "1", startedAt: Self.now, credentials: 4, valid: 4)
        #expect(
            StatusTable.render(daemon: busy, credentials: [], now: Self.now).hasSuffix(
                "\nNo credentials visible to this user.\n"
            )
        )
    }

    @Test func jsonHasTheInterfaceFields() throws {
        let daemon = DaemonStatus(version: "0.1.0", startedAt: 5)
        let row = CredentialStatus(
            userIdentifier: "alice",
            provider: "example",
            state: "valid",
            expiresAt: 10,
            issuedAt: 1,
            sessionStartedAt: 1
        )
        let text = StatusTable.json(daemon: daemon, credentials: [row])
        let value = try JSONParser.parse(text)
        let object = try #require(value.objectValue)
        #expect(object["daemon"]?.objectValue == daemon.json)
        #expect(object["credentials"] == .array([.object(row.json)]))
        #expect(!StatusTable.json(daemon: nil, credentials: []).contains("daemon"))
    }
}

struct TokenResponseInputTests {
    static let token = "2YotnFZFEjr1zCsicMWpAA"

    @Test func parsesAFullResponse() throws {
        let json = #"""
            {"access_token":"2YotnFZFEjr1zCsicMWpAA","token_type":"Bearer","expires_in":3600,
             "refresh_token":"tGzv3JOkF0XG5Qx2TlKWIA","scope":"read write","id_token":"ignored"}

            """#
        let input = try TokenResponseInput.parse(Array(json.utf8))
        #expect(
            input
                == TokenResponseInput(
                    accessToken: Self.token,
                    refreshToken: "tGzv3JOkF0XG5Qx2TlKWIA",
                    tokenType: "Bearer",
                    expiresIn: 3600,
                    scope: "read write"
                )
        )
        let request = input.request(
            userIdentifier: "alice",
            provider: "example",
            readers: ["group:deploy"],
            replace: true
        )
        #expect(request.accessToken == Self.token)
        #expect(request.refreshToken == "tGzv3JOkF0XG5Qx2TlKWIA")
        #expect(request.expiresIn == 3600)
        #expect(request.readers == ["group:deploy"])
        #expect(request.replace)
        #expect(!"\(input)".contains(Self.token))
    }

    @Test func acceptsTheMinimumAndStringExpiresIn() throws {
        #expect(
            try TokenResponseInput.parse(Array(#"{"access_token":"abc"}"#.utf8))
                == TokenResponseInput(accessToken: "abc")
        )
        #expect(
            try TokenResponseInput.parse(Array(#"{"access_token":"abc","expires_in":"60","refresh_token":null}"#.utf8))
                .expiresIn == 60
        )
    }

    @Test(arguments: [
        ("", "empty"),
        ("  \n", "empty"),
        ("access_token=abc", "not valid JSON"),
        ("[1]", "not a JSON object"),
        (#"{"token_type":"Bearer"}"#, "no access_token"),
        (#"{"access_token":""}"#, "access_token is empty"),
        (#"{"access_token":42}"#, "expected a string"),
        (#"{"access_token":"a\nb"}"#, "characters a token cannot have"),
        (#"{"error":"invalid_grant","error_description":"expired"}"#, "error response"),
        (#"{"access_token":"abc","expires_in":-1}"#, "expires_in"),
        (#"{"access_token":"abc","expires_in":"soon"}"#, "expires_in"),
        (#"{"access_token":"abc","refresh_token":""}"#, "refresh_token"),
        (#"{"access_token":"abc","scope":7}"#, "scope"),
        (#"{"access_token":"abc","access_token":"def"}"#, "not valid JSON"),
    ])
    func refusesBadInput(text: String, expected: String) {
        #expect {
            _ = try TokenResponseInput.parse(Array(text.utf8))
        } throws: { error in
            let message = (error as? TokenResponseInput.ParseError)?.description ?? ""
            return message.contains(expected)
        }
    }

    @Test func errorsNeverQuoteTheInput() {
        let secret = "SECRET-do-not-print"
        for text in [
            #"{"access_token":"\#(secret)\u0001"}"#, #"{"access_token":"ok","refresh_token":"\#(secret)\n"}"#,
            "\(secret) not json",
            #"{"access_token":["\#(secret)"]}"#,
        ] {
            do {
                _ = try TokenResponseInput.parse(Array(text.utf8))
                Issue.record("accepted bad input")
            } catch {
                #expect(!error.description.contains(secret))
            }
        }
    }

    @Test func refusesOversizedInput() {
        let big = #"{"access_token":""# + String(repeating: "a", count: TokenResponseInput.maximumBytes) + #""}"#
        #expect(throws: TokenResponseInput.ParseError.self) { try TokenResponseInput.parse(Array(big.utf8)) }
    }
}

struct TokenctlExitStatusTests {
    @Test(arguments: [
        (TokendClientError.Code.daemonUnavailable, Int32(3)), (.unknownUser, 4), (.permissionDenied, 5),
        (.reauthenticationRequired, 6),
        (.refreshFailed, 7), (.timeout, 8), (.credentialExists, 9), (.unknownProvider, 10), (.invalidCredential, 11),
        (.loginFailed, 12), (.unknownLogin, 12), (.quotaExceeded, 13), (.invalidParameter, 2), (.protocolError, 1), (.storageFailed, 1),
        (.other, 1),
        (.cancelled, 1),
    ])
    func mapsCodesToStatuses(code: TokendClientError.Code, status: Int32) {
        #expect(TokenctlExitStatus.status(for: TokendClientError(code: code)) == status)
    }

    @Test func tableListsEveryStatusOnce() {
        let statuses = TokenctlExitStatus.table.map(\.status)
        #expect(statuses == Array(0...13))
        #expect(TokenctlExitStatus.helpText.contains(" 3  tokend is not running"))
    }
}

@Suite struct AdministratorsSocketTests {
    @Test func rootTriesTheSocketBesideTheOneItWouldUse() {
        #expect(AdministratorsSocket.path(explicitSocket: nil, environmentSocket: nil, effectiveUID: 0) == "/run/tokend/io.tokend.admin")
        #expect(AdministratorsSocket.path(explicitSocket: nil, environmentSocket: "/tmp/t.sock", effectiveUID: 0) == "/tmp/t.sock.admin")
        #expect(AdministratorsSocket.path(explicitSocket: nil, environmentSocket: "", effectiveUID: 0) == "/run/tokend/io.tokend.admin")
    }

    @Test func otherUsersAndANamedSocketUseOnlyThePublicOne() {
        #expect(AdministratorsSocket.path(explicitSocket: nil, environmentSocket: nil, effectiveUID: 1000) == nil)
        #expect(AdministratorsSocket.path(explicitSocket: "/run/tokend/io.tokend", environmentSocket: nil, effectiveUID: 0) == nil)
    }
}

@Suite struct RemovalTextTests {
    @Test func whatHappenedAtTheProviderIsSaid() {
        #expect(RemovalText.describe(RemovalResult(revocation: .revoked), user: "alice").hasSuffix("were revoked at the provider."))
        let notRevoked = RemovalText.describe(
            RemovalResult(revocation: .notRevoked, problem: "they came from AddCredential"), user: "alice")
        #expect(notRevoked.contains("were not revoked") && notRevoked.contains("--revoke-anyway") && notRevoked.contains("AddCredential"))
        #expect(RemovalText.describe(RemovalResult(revocation: .unsupported), user: "alice").contains("no revocation endpoint"))
        let failed = RemovalText.describe(RemovalResult(revocation: .failed, problem: "connection refused"), user: "alice")
        #expect(failed.contains("failed: connection refused"))
        // An older daemon says nothing about it.
        #expect(RemovalText.describe(RemovalResult(revocation: nil), user: "alice") == "Removed the credential of user 'alice'.")
    }

    @Test func aReplyFromANewerDaemonWithAnUnknownRevocationReadsAsNone() throws {
        let result = try RemovalResult(json: ["revocation": .string("something_new")])
        #expect(result.revocation == nil)
    }
}

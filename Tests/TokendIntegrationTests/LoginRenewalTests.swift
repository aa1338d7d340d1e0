import Foundation
import Testing
import TokendTestSupport

/// `tokenctl login USER` on an existing credential renews it in place, against the real
/// django-oauth-toolkit IdP (device flow): same name, readers and token file; a `Watch` stream
/// gets the new token without reconnecting; the old refresh token is revoked at the IdP once
/// the new one is stored, and no refresh grant is sent for it; a second uid may not renew.
@Suite(.serialized)
struct LoginRenewalTests {
    static let reader: UInt32 = 7100

    static func provider(_ idp: IdentityProvider) -> String {
        LoginFlowTests.deviceProvider(idp) + "\n\n[token_files.alice]\npath = \"alice-token\"\nmode = \"0600\"\n"
    }

    /// A device login through `tokenctl login`, approved at the IdP; its output.
    static func deviceLogin(_ setup: LoginFlowTests.Setup, _ arguments: [String]) async throws -> CommandResult {
        let login = try setup.login(arguments + ["--device"])
        let userCode = try await login.line(startingWith: "User code: ")
        try await setup.idp.approveDevice(userCode: userCode)
        return try await login.finish()
    }

    /// The status and body of a refresh grant sent by the test itself with `refreshToken`
    /// (on stdin, not in argv), as the device client.
    static func refreshAtIdP(_ idp: IdentityProvider, _ refreshToken: String) async throws -> (status: Int, body: String) {
        let script = """
            import sys, urllib.error, urllib.parse, urllib.request
            body = urllib.parse.urlencode({"grant_type": "refresh_token", "refresh_token": sys.stdin.read(),
                                           "client_id": "tokend-device"}).encode()
            try:
                with urllib.request.urlopen(urllib.request.Request(sys.argv[1], data=body), timeout=20) as answer:
                    print(answer.status); print(answer.read().decode())
            except urllib.error.HTTPError as error:
                print(error.code); print(error.read().decode())
            """
        let result = try await runCommand(
            "/usr/bin/python3", ["-c", script, idp.tokenEndpoint], stdin: refreshToken, timeout: .seconds(60))
        let lines = result.stdout.split(separator: "\n", maxSplits: 1).map(String.init)
        guard result.status == 0, let status = lines.first.flatMap({ Int($0) }) else {
            throw TestFailure("the refresh request failed: \(result.stderr)")
        }
        return (status, lines.count > 1 ? lines[1] : "")
    }

    @Test func aLoginOnAnExistingCredentialRenewsItInPlace() async throws {
        let setup = try await LoginFlowTests.Setup.start(
            idpArguments: ["--device-flow", "--device-interval", "1"], providers: Self.provider)
        // Enrolled by root (an administrator) for two readers, written to a token file.
        let first = try await Self.deviceLogin(
            setup, ["alice", "--provider", "dev", "--reader", "uid:0", "--reader", "uid:\(Self.reader)"])
        #expect(first.status == 0 && first.stdout.contains("Logged in: stored"), "\(first) \(setup.daemon.log.suffix(2000))")
        let client = try RawClient(path: setup.daemon.socketPath)
        let oldToken = try #require(try client.call(Tokens.tokenCall(user: "alice")).accessToken)
        let tokenFile = setup.directory.file("alice-token")
        #expect(
            try await HATProviderTests.eventually(.seconds(20)) {
                (try? String(contentsOfFile: tokenFile, encoding: .utf8))?.contains(oldToken) == true
            })
        let issued = try await setup.idp.refreshTokens(client: "tokend-device")
        try #require(issued.count == 1, "one refresh token so far: \(issued.count)")
        let oldRefresh = issued[0]

        // A second uid, a reader of the credential, may not renew it: the answer a replacement gets.
        let begin: (Bool) -> String = { replace in
            let parameters: [String: Any] = ["userIdentifier": "alice", "provider": "dev", "flow": "device", "replace": replace]
            let call: [String: Any] = ["method": "io.tokend.TokenProvider.BeginLogin", "parameters": parameters]
            return String(decoding: try! JSONSerialization.data(withJSONObject: call), as: UTF8.self)
        }
        let renewal = try await OtherUser.call(begin(false), socket: setup.daemon.socketPath, uid: Self.reader, gid: Self.reader)
        let replacement = try await OtherUser.call(begin(true), socket: setup.daemon.socketPath, uid: Self.reader, gid: Self.reader)
        #expect(renewal.errorName == "io.tokend.TokenProvider.PermissionDenied", "\(renewal)")
        #expect(NSDictionary(dictionary: renewal) == NSDictionary(dictionary: replacement), "\(renewal) vs \(replacement)")
        let viaTokenctl = try await runCommand(
            "/usr/bin/setpriv",
            [
                "--reuid=\(Self.reader)", "--regid=\(Self.reader)", "--clear-groups", Repository.binary("tokenctl"), "login", "alice",
                "--device",
                "--socket", setup.daemon.socketPath,
            ])
        #expect(
            viaTokenctl.status != 0 && viaTokenctl.stderr.contains("PermissionDenied") || viaTokenctl.stderr.contains("ermission"),
            "\(viaTokenctl)")

        // A watcher, connected before the renewal.
        let watcher = try RawClient(path: setup.daemon.socketPath)
        try watcher.send(WatchAndTokenFileTests.watchCall("alice"))
        #expect(try RawClient.object(try #require(try watcher.receive())).accessToken == oldToken)

        let postsBefore = try await setup.idp.postCount()
        let pollsBefore = try await setup.idp.devicePolls()["polls"] ?? 0
        // The owner (root) renews, without naming the provider.
        let renewed = try await Self.deviceLogin(setup, ["alice"])
        #expect(renewed.status == 0, "\(renewed) \(setup.daemon.log.suffix(2000))")
        #expect(renewed.stdout.contains("Logged in: renewed the credential of user 'alice' (provider dev)"), "\(renewed.stdout)")

        let newToken = try #require(try client.call(Tokens.tokenCall(user: "alice")).accessToken)
        #expect(newToken != oldToken)
        // The watcher got it on the same stream.
        let update = try RawClient.object(try #require(try watcher.receive()))
        #expect(update.accessToken == newToken && update["continues"] as? Bool == true, "\(update)")
        // Readers kept: the reader uid still gets the token.
        let asReader = try await OtherUser.call(
            Tokens.tokenCall(user: "alice"), socket: setup.daemon.socketPath, uid: Self.reader, gid: Self.reader)
        #expect(asReader.accessToken == newToken, "\(asReader)")
        // The token file binding writes the new token.
        #expect(
            try await HATProviderTests.eventually(.seconds(20)) {
                (try? String(contentsOfFile: tokenFile, encoding: .utf8))?.contains(newToken) == true
            })

        // At the IdP: the renewal was the login's grant alone (device polls, no refresh grant),
        // one revocation, and the old refresh token no longer works.
        let posts = try await setup.idp.postCount() - postsBefore
        let polls = (try await setup.idp.devicePolls()["polls"] ?? 0) - pollsBefore
        #expect(posts == polls && polls >= 1, "token endpoint POSTs \(posts), device polls \(polls)")
        #expect(try await HATProviderTests.eventually(.seconds(20)) { try await setup.idp.postCount(path: "/o/revoke_token/") == 1 })
        let spent = try await Self.refreshAtIdP(setup.idp, oldRefresh)
        #expect(spent.status == 400 && spent.body.contains("invalid_grant"), "\(spent)")
        #expect(setup.daemon.log.contains("credential renewed"))
        try await setup.stop()
        #expect(!setup.daemon.log.contains(oldRefresh) && !setup.daemon.log.contains(newToken))
    }
}

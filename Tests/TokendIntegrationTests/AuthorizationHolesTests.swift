import Foundation
import Testing
import TokendTestSupport

/// The authorization holes where features meet (issue 29): each attack as another uid (through
/// `setpriv`) against the real daemon, the real test IdP and its fault proxy.
@Suite(.serialized)
struct AuthorizationHolesTests {
    static let reader: UInt32 = 7100, other: UInt32 = 7300, nobody: UInt32 = 65534

    static func remove(_ user: String) -> String {
        #"{"method":"io.tokend.TokenProvider.RemoveCredential","parameters":{"userIdentifier":"\#(user)"}}"#
    }

    static func replacing(_ call: String) -> String { AuthorizationMatrixTests.replacing(call) }

    // MARK: 1. Revocation only of what tokend obtained

    /// A reader of `shared` copies its access token and enrols it under names of its own, as the
    /// access token and as the "refresh token", then removes them. tokend revokes neither (it did
    /// not get them from the provider): the shared credential's token stays active at the IdP and
    /// the credential keeps refreshing.
    @Test func aReaderCannotRevokeASharedGrantThroughACopyOfItsToken() async throws {
        let setup = try await IdPDaemon.start()
        let root = try RawClient(path: setup.daemon.socketPath)
        let minted = try await setup.idp.mint(count: 1)[0]
        let added = try root.call(
            Tokens.addCall(
                user: "shared", access: minted["access_token"] as! String, refresh: minted["refresh_token"] as? String,
                readers: ["uid:\(Self.reader)"]))
        #expect(added.errorName == nil, "\(added)")
        func read(minValid: Int) async throws -> [String: Any] {
            try await OtherUser.call(
                Tokens.tokenCall(user: "shared", minValid: minValid), socket: setup.daemon.socketPath, uid: Self.reader, gid: Self.reader)
        }
        // tokend's own grant: the token the reader copies is one tokend got from the provider.
        let copied = try #require(try await read(minValid: 7200).accessToken, "\(setup.daemon.log.suffix(1500))")
        #expect(try await setup.idp.tokenInfo(accessToken: copied)["active"] as? Bool == true)
        let attempts = [
            ("mine", Tokens.addCall(user: "mine", access: copied, refresh: nil)),
            ("mine-as-refresh", Tokens.addCall(user: "mine-as-refresh", access: Tokens.random("x-"), refresh: copied)),
        ]
        for (name, call) in attempts {
            let add = try await OtherUser.call(call, socket: setup.daemon.socketPath, uid: Self.reader, gid: Self.reader)
            #expect(add.errorName == nil, "\(name): \(add)")
            let removed = try await OtherUser.call(Self.remove(name), socket: setup.daemon.socketPath, uid: Self.reader, gid: Self.reader)
            #expect(removed.errorName == nil, "\(name): \(removed)")
        }
        #expect(try await setup.idp.postCount(path: "/o/revoke_token/") == 0, "nothing was sent to the revocation endpoint")
        #expect(
            try await setup.idp.tokenInfo(accessToken: copied)["active"] as? Bool == true,
            "the shared credential's token is still active at the IdP")
        // And it keeps refreshing: a token valid for longer than the IdP issues forces a grant.
        try await Task.sleep(for: .milliseconds(1100))  // forced_refresh_interval
        let next = try await read(minValid: 7200)
        let fresh = try #require(next.accessToken, "\(next) \(setup.daemon.log.suffix(1500))")
        #expect(fresh != copied)
        #expect(try await setup.idp.tokenInfo(accessToken: fresh)["active"] as? Bool == true)

        // What tokend did get from the provider is still revoked when its credential goes.
        #expect(try root.call(Self.remove("shared")).errorName == nil)
        #expect(try await setup.idp.postCount(path: "/o/revoke_token/") == 1)
        #expect(setup.daemon.log.contains("refresh token revoked"))
        try await setup.daemon.stop()
        await setup.idp.stop()
    }

    // MARK: 2. Token files cannot be fed by someone else

    /// `[token_files.backup]` is configured and `backup` is not enrolled (a new install): uid
    /// 65534 may not enrol it, nor replace or remove it once an administrator has enrolled it
    /// for that uid, and the file holds the administrator's token.
    @Test func aTokenFilesCredentialCannotBeSelfEnrolledByAnotherUid() async throws {
        let directory = try ScratchDirectory()
        try FileManager.default.createDirectory(atPath: directory.file("tokens"), withIntermediateDirectories: true)
        let daemon = try DaemonProcess(
            configuration: DaemonProcess.configuration() + "\n[token_files.backup]\npath = \"tokens/backup\"\n", directory: directory)
        try await daemon.start()
        let planted = Tokens.random("planted-")
        let refused = try await OtherUser.call(
            Tokens.addCall(user: "backup", access: planted, refresh: nil), socket: daemon.socketPath, uid: Self.nobody, gid: Self.nobody)
        #expect(refused.errorName == "io.tokend.TokenProvider.PermissionDenied", "\(refused)")
        let reason = refused.parameters["reason"] as? String ?? ""
        #expect(reason.contains("token file"), "the refusal names its reason: \(refused)")

        // The administrator enrols it, for the service's uid as a reader; that uid still may
        // not replace or remove it.
        let root = try RawClient(path: daemon.socketPath)
        let adminToken = Tokens.random("admin-")
        #expect(
            try root.call(Tokens.addCall(user: "backup", access: adminToken, refresh: nil, readers: ["uid:\(Self.nobody)"])).errorName
                == nil)
        for call in [Self.replacing(Tokens.addCall(user: "backup", access: planted, refresh: nil)), Self.remove("backup")] {
            let reply = try await OtherUser.call(call, socket: daemon.socketPath, uid: Self.nobody, gid: Self.nobody)
            #expect(reply.errorName == "io.tokend.TokenProvider.PermissionDenied", "\(call): \(reply)")
        }
        let file = directory.file("tokens/backup")
        let deadline = ContinuousClock.now + .seconds(10)
        while ContinuousClock.now < deadline, (try? String(contentsOfFile: file, encoding: .utf8)) != adminToken {
            try await Task.sleep(for: .milliseconds(50))
        }
        #expect((try? String(contentsOfFile: file, encoding: .utf8)) == adminToken, "the file holds the administrator's token")
        try await daemon.stop()
        #expect(!daemon.log.contains(planted))
    }

    /// The uids a token file's `enrolling_uids` names may enrol, replace and remove its
    /// credential themselves; other uids still may not.
    @Test func theUidsATokenFileNamesMayEnrolItsCredential() async throws {
        let directory = try ScratchDirectory()
        try FileManager.default.createDirectory(atPath: directory.file("tokens"), withIntermediateDirectories: true)
        let config =
            DaemonProcess.configuration() + """

                [token_files.reports]
                path = "tokens/reports"
                enrolling_uids = [\(Self.nobody)]
                """
        let daemon = try DaemonProcess(configuration: config, directory: directory)
        try await daemon.start()
        let stranger = try await OtherUser.call(
            Tokens.addCall(user: "reports", access: Tokens.random("s-"), refresh: nil), socket: daemon.socketPath, uid: Self.other,
            gid: Self.other)
        #expect(stranger.errorName == "io.tokend.TokenProvider.PermissionDenied", "\(stranger)")
        let own = Tokens.random("own-")
        for call in [
            Tokens.addCall(user: "reports", access: Tokens.random("first-"), refresh: nil),
            Self.replacing(Tokens.addCall(user: "reports", access: own, refresh: nil)),
        ] {
            let reply = try await OtherUser.call(call, socket: daemon.socketPath, uid: Self.nobody, gid: Self.nobody)
            #expect(reply.errorName == nil, "\(reply)")
        }
        let file = directory.file("tokens/reports")
        let deadline = ContinuousClock.now + .seconds(10)
        while ContinuousClock.now < deadline, (try? String(contentsOfFile: file, encoding: .utf8)) != own {
            try await Task.sleep(for: .milliseconds(50))
        }
        #expect((try? String(contentsOfFile: file, encoding: .utf8)) == own)
        let removed = try await OtherUser.call(Self.remove("reports"), socket: daemon.socketPath, uid: Self.nobody, gid: Self.nobody)
        #expect(removed.errorName == nil, "\(removed)")
        try await daemon.stop()
    }

    // MARK: 5. Every reply re-checks who may read it

    /// What happens to the credential while the reader waits: an administrator replaces it
    /// with one the reader may not read, or removes it.
    enum ChangeUnderAWaitingReader: String, CaseIterable, Sendable { case replaced, removed }

    /// R waits on a forced refresh through a slow token endpoint; meanwhile the credential
    /// changes. Either way the reader learns nothing it could not learn before: PermissionDenied, the
    /// answer for a credential that is not theirs, never the replacement's token and never
    /// UnknownUser (which would tell a non-administrator that a name is free).
    @Test(arguments: ChangeUnderAWaitingReader.allCases)
    func aWaitingReaderIsCheckedAgainstTheCredentialItWouldGet(_ change: ChangeUnderAWaitingReader) async throws {
        let (setup, proxy) = try await IdPDaemon.startBehindProxy(daemonExtra: #"call_timeout = "15s""#)
        let root = try RawClient(path: setup.daemon.socketPath)
        let minted = try await setup.idp.mint(count: 1)[0]
        #expect(
            try root.call(
                Tokens.addCall(
                    user: "shared", access: minted["access_token"] as! String, refresh: minted["refresh_token"] as? String,
                    readers: ["uid:\(Self.reader)"])
            ).errorName == nil)
        try await proxy.resetStats()
        try await proxy.set(["mode": "slow:4", "times": 1])
        let socket = setup.daemon.socketPath
        async let waiting = OtherUser.call(
            Tokens.tokenCall(user: "shared", minValid: 7200), socket: socket, uid: Self.reader, gid: Self.reader)
        // The reader's grant is at the token endpoint: change the credential under it.
        let deadline = ContinuousClock.now + .seconds(20)
        while ContinuousClock.now < deadline, (try await proxy.stats()["token_posts"] as? Int ?? 0) < 1 {
            try await Task.sleep(for: .milliseconds(50))
        }
        let replacement = Tokens.random("replacement-")
        switch change {
        case .replaced:
            let replaced = try root.call(
                Self.replacing(Tokens.addCall(user: "shared", access: replacement, refresh: nil, readers: ["uid:\(Self.other)"])))
            #expect(replaced.errorName == nil, "\(replaced)")
        case .removed:
            let removed = try root.call(Self.remove("shared"))
            #expect(removed.errorName == nil, "\(removed)")
        }
        let answer = try await waiting
        #expect(answer.errorName == "io.tokend.TokenProvider.PermissionDenied", "\(answer)")
        #expect(!String(describing: answer).contains(replacement), "the reader never gets the new credential's token")
        try await setup.daemon.stop()
        proxy.stop()
        await setup.idp.stop()
    }

    // MARK: 7. Limits before the provider is asked

    /// 30 BeginLogin calls from one uid, all at once: the provider sees at most the per-uid cap
    /// of device authorization requests.
    @Test func beginLoginCapsComeBeforeTheDeviceAuthorizationRequest() async throws {
        try requireVenv()
        let directory = try ScratchDirectory()
        let idp = try IdentityProvider(directory: directory, options: .init(extraArguments: ["--device-flow", "--device-interval", "1"]))
        try await idp.start()
        let config = DaemonProcess.configuration(
            extraDaemon: #"call_timeout = "20s""#, providers: LoginFlowTests.deviceProvider(idp))
        let daemon = try DaemonProcess(configuration: config, directory: directory)
        try await daemon.start()
        let call =
            #"{"method":"io.tokend.TokenProvider.BeginLogin","parameters":{"userIdentifier":"alice","provider":"dev","flow":"device"}}"#
        let client = try RawClient(path: daemon.socketPath)
        for _ in 0..<30 { try client.send(call) }
        var begun = 0
        var refusals: [String] = []
        for _ in 0..<30 {
            let reply = try RawClient.object(try #require(try client.receive()))
            if reply.errorName == nil {
                begun += 1
            } else {
                refusals.append("\(reply.errorName ?? "") \(reply.parameters["reason"] ?? "")")
            }
        }
        let requests = try await idp.postCount(path: "/o/device-authorization/")
        #expect(begun == 8, "\(refusals)")
        #expect(requests <= 8, "the IdP saw \(requests) device authorization requests for 30 calls")
        #expect(refusals.allSatisfy { $0.contains("too many logins") }, "\(refusals)")
        try await daemon.stop()
        await idp.stop()
    }

    // MARK: 8. Self-enrolment per provider

    /// An `exec` provider's command runs with tokend's authority: a user may not enrol a
    /// credential for it unless its section says `allow_self_enrolment = true`. Administrators
    /// always may.
    @Test(arguments: [false, true])
    func execProvidersForbidSelfEnrolmentUnlessAllowed(allowed: Bool) async throws {
        let directory = try ScratchDirectory()
        let command = try ExecProviderTests.script(in: directory, output: #"json.dumps({"access_token": "minted", "expires_in": 3600})"#)
        let daemon = try DaemonProcess(
            configuration: ExecProviderTests.config(command: command, extra: allowed ? "allow_self_enrolment = true" : ""),
            directory: directory)
        try await daemon.start()
        let own = try await OtherUser.call(
            Tokens.addCall(user: "mine", access: Tokens.random("e-"), refresh: "r"), socket: daemon.socketPath, uid: Self.nobody,
            gid: Self.nobody)
        if allowed {
            #expect(own.errorName == nil, "\(own)")
        } else {
            #expect(own.errorName == "io.tokend.TokenProvider.PermissionDenied", "\(own)")
            #expect((own.parameters["reason"] as? String ?? "").contains("allow_self_enrolment"), "\(own)")
        }
        let root = try RawClient(path: daemon.socketPath)
        #expect(try root.call(Tokens.addCall(user: "admins", access: Tokens.random("e-"), refresh: "r")).errorName == nil)
        try await daemon.stop()
    }

    // MARK: 9. The metrics text file

    /// Whoever can write the metrics file's folder plants a file and a symlink where the old
    /// code put its temporary file (`.NAME.PID.tmp`): tokend neither writes through them nor
    /// stops writing the metrics.
    @Test func theMetricsFileIsWrittenThroughNothingPlantedBesideIt() async throws {
        let directory = try ScratchDirectory()
        let daemon = try DaemonProcess(
            configuration: DaemonProcess.configuration() + "\n[metrics]\ntextfile = \"metrics/tokend.prom\"\n", directory: directory)
        try FileManager.default.createDirectory(atPath: directory.file("metrics"), withIntermediateDirectories: true)
        chmod(directory.file("metrics"), 0o1777)
        try await daemon.start()
        let metrics = directory.file("metrics/tokend.prom")
        let oldTemporary = directory.file("metrics/.tokend.prom.\(daemon.process.processIdentifier).tmp")
        func inode(_ path: String) -> UInt64? {
            var info = stat()
            return lstat(path, &info) == 0 ? UInt64(info.st_ino) : nil
        }
        func waitForRewrite(after previous: UInt64?) async throws -> UInt64? {
            let deadline = ContinuousClock.now + .seconds(15)
            while ContinuousClock.now < deadline {
                if let now = inode(metrics), now != previous { return now }
                try await Task.sleep(for: .milliseconds(50))
            }
            return nil
        }
        let first = try #require(try await waitForRewrite(after: nil), "the metrics file is written")
        let root = try RawClient(path: daemon.socketPath)

        // A regular file of another uid, writable by all: it must not become the metrics file.
        try "planted\n".write(toFile: oldTemporary, atomically: false, encoding: .utf8)
        chmod(oldTemporary, 0o666)
        chown(oldTemporary, Self.nobody, Self.nobody)
        let plantedInode = inode(oldTemporary)
        #expect(try root.call(Tokens.addCall(user: "one", access: Tokens.random("m-"), refresh: nil)).errorName == nil)
        let second = try #require(try await waitForRewrite(after: first), "the metrics file is rewritten after a change")
        #expect(second != plantedInode, "the planted file became the metrics file")
        var info = stat()
        #expect(stat(metrics, &info) == 0 && info.st_uid == 0, "the metrics file is tokend's")
        #expect((try? String(contentsOfFile: oldTemporary, encoding: .utf8)) == "planted\n" || inode(oldTemporary) == nil)
        unlink(oldTemporary)

        // A symlink there does not stop the writes.
        symlink(directory.file("elsewhere"), oldTemporary)
        #expect(try root.call(Tokens.addCall(user: "two", access: Tokens.random("m-"), refresh: nil)).errorName == nil)
        #expect(try await waitForRewrite(after: second) != nil, "the metrics file is still rewritten")
        #expect(!FileManager.default.fileExists(atPath: directory.file("elsewhere")), "nothing was written through the symlink")
        try await daemon.stop()
    }
}

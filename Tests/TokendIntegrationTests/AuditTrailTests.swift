import Foundation
import Testing
import TokendTestSupport

/// The audit trail against the real daemon: every release of a token and every refusal is a
/// record with its `MESSAGE_ID`, the caller, the credential, the method and the token's
/// fingerprint, never the token; a connection's repeated reads of one token are one record and
/// a count at the close.
@Suite(.serialized)
struct AuditTrailTests {
    /// The audit trail is off by default; these daemons turn it on.
    static let auditTable = "\n[audit]\nenabled = true\n"
    static let auditOn = DaemonProcess.configuration() + auditTable
    static let releasedID = "52708dab149a40cd9828dcaa8cc14222"
    static let refusedID = "37506a5cbb314d1fabed871e2c249211"

    /// One record, as a plain line on standard error carries it (under systemd each item is a
    /// journal field of the same name, upper-cased).
    struct Record: CustomStringConvertible {
        var message: String
        var fields: [String: String]
        subscript(_ key: String) -> String? { fields[key] }
        var description: String { "\(message) \(fields.sorted { $0.key < $1.key })" }
    }

    /// The audit records in `log`: lines of swift-log's stream format,
    /// `TIMESTAMP LEVEL LABEL: key=value key=value … [MODULE] message`.
    static func records(_ log: String) -> [Record] {
        log.split(separator: "\n").compactMap { line -> Record? in
            guard line.contains("message_id="), let start = line.range(of: ": "),
                let end = line.range(of: " [", options: .backwards), start.upperBound < end.lowerBound
            else { return nil }
            let message = String(line[end.upperBound...].drop { $0 != "]" }.dropFirst().drop { $0 == " " })
            guard message == "token released" || message == "token refused" else { return nil }
            return Record(message: message, fields: fields(String(line[start.upperBound..<end.lowerBound])))
        }
    }

    /// `key=value key=value …`; a value runs to the next ` key=` (reasons have spaces).
    static func fields(_ text: String) -> [String: String] {
        let pattern = try! NSRegularExpression(pattern: #"(?:^| )([a-z][a-z0-9_]*)="#)
        let matches = pattern.matches(in: text, range: NSRange(text.startIndex..., in: text))
        var fields: [String: String] = [:]
        for (index, match) in matches.enumerated() {
            let key = String(text[Range(match.range(at: 1), in: text)!])
            let valueStart = Range(match.range, in: text)!.upperBound
            let valueEnd = index + 1 < matches.count ? Range(matches[index + 1].range, in: text)!.lowerBound : text.endIndex
            fields[key] = String(text[valueStart..<valueEnd])
        }
        return fields
    }

    /// Waits (bounded) until `daemon`'s log has records for which `condition` holds.
    static func waitForRecords(_ daemon: DaemonProcess, timeout: Duration = .seconds(20), _ condition: ([Record]) -> Bool)
        async throws -> [Record]
    {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            let records = records(daemon.log)
            if condition(records) { return records }
            try await Task.sleep(for: .milliseconds(50))
        }
        let records = records(daemon.log)
        if condition(records) { return records }
        throw TestFailure("the expected audit records did not come within \(timeout); records: \(records)")
    }

    /// The first 16 hex digits of the token's SHA-256, as an IdP-side operator computes them.
    static func fingerprint(_ token: String) async throws -> String {
        let result = try await runCommand("/usr/bin/sha256sum", [], stdin: token)
        return String(result.stdout.prefix(16))
    }

    /// A JWT with the given `jti` (unsigned: tokend reads claims only to plan and to label).
    static func jwt(jti: String) -> String {
        func b64(_ text: String) -> String {
            Data(text.utf8).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
                .replacingOccurrences(of: "=", with: "")
        }
        let now = Int(Date().timeIntervalSince1970)
        return b64(#"{"alg":"RS256","typ":"JWT"}"#) + "." + b64(#"{"sub":"alice","jti":"\#(jti)","iat":\#(now)}"#) + "."
            + Tokens.random("sig", length: 43)
    }

    @Test func aPersistentConnectionGivesOneRecordAndACountAtTheClose() async throws {
        let daemon = try DaemonProcess(configuration: Self.auditOn)
        try await daemon.start()
        let jti = Tokens.random("jti-", length: 24)
        let access = Self.jwt(jti: jti)
        let refresh = Tokens.random("REFRESH-")
        do {
            let admin = try RawClient(path: daemon.socketPath)
            try #require(
                try admin.call(Tokens.addCall(user: "alice", access: access, refresh: refresh, readers: ["uid:0", "uid:65534"]))
                    .errorName == nil)
            for _ in 0..<25 { #expect(try admin.call(Tokens.tokenCall(user: "alice")).accessToken == access) }
        }
        // The connection above is closed: its count comes.
        var records = try await Self.waitForRecords(daemon) { records in records.contains { $0["audit_count"] == "25" } }
        let released = records.filter { $0["user_identifier"] == "alice" && $0["audit_method"] == "ProvideTokenReplacement" }
        #expect(released.count == 2, "one record at the first release, one count at the close: \(released)")
        let first = try #require(released.first)
        #expect(first.message == "token released")
        #expect(first["message_id"] == Self.releasedID)
        #expect(first["audit_result"] == "released")
        #expect(first["audit_count"] == "1")
        #expect(first["audit_caller_uid"] == "\(getuid())")
        #expect(first["audit_caller_gid"] == "\(getgid())")
        #expect(first["audit_caller_pid"] == "\(getpid())")
        // The executable as tokend read it: this test process's.
        let ownExecutable = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
        #expect(first["audit_caller_exe"] == ownExecutable)
        #expect(first["audit_token_jti"] == jti)
        #expect(first["audit_token_sha256"] == (try await Self.fingerprint(access)))
        let total = try #require(released.last)
        #expect(total["audit_count"] == "25")
        #expect(total["audit_connection"] == first["audit_connection"])
        #expect(total["audit_token_sha256"] == first["audit_token_sha256"])

        // Another program, as another user, on a connection of its own: a record of its own.
        let reply = try await OtherUser.call(Tokens.tokenCall(user: "alice"), socket: daemon.socketPath, uid: 65534, gid: 65534)
        #expect(reply.accessToken == access)
        records = try await Self.waitForRecords(daemon) { records in records.contains { $0["audit_caller_uid"] == "65534" } }
        let other = try #require(records.first { $0["audit_caller_uid"] == "65534" })
        #expect(other["audit_caller_gid"] == "65534")
        #expect(other["audit_caller_exe"]?.hasPrefix("/usr/bin/python3") == true, "\(other)")
        #expect(other["audit_connection"] != first["audit_connection"])
        #expect(other["audit_count"] == "1")
        try await daemon.stop()
        // A connection that read once has no count record; no token is in any line.
        #expect(Self.records(daemon.log).filter { $0["audit_caller_uid"] == "65534" }.count == 1)
        #expect(!daemon.log.contains(access))
        #expect(!daemon.log.contains(refresh))
    }

    @Test func refusalsAreRecordedWithTheirReason() async throws {
        let daemon = try DaemonProcess(configuration: Self.auditOn)
        try await daemon.start()
        let access = Tokens.random("ACCESS-")
        let admin = try RawClient(path: daemon.socketPath)
        try #require(try admin.call(Tokens.addCall(user: "carol", access: access, refresh: nil, readers: ["uid:0"])).errorName == nil)
        // Not a reader, and a credential that does not exist: refused alike to the caller.
        for user in ["carol", "nobody-here"] {
            let reply = try await OtherUser.call(Tokens.tokenCall(user: user), socket: daemon.socketPath, uid: 65534, gid: 65534)
            #expect(reply.errorName == "io.tokend.TokenProvider.PermissionDenied")
        }
        let watch = #"{"method":"io.tokend.TokenProvider.Watch","parameters":{"userIdentifier":"carol"},"more":true}"#
        #expect(try await OtherUser.call(watch, socket: daemon.socketPath, uid: 65534, gid: 65534).errorName != nil)
        let records = try await Self.waitForRecords(daemon) { records in
            records.filter { $0["message_id"] == Self.refusedID }.count >= 3
        }
        let refused = records.filter { $0["message_id"] == Self.refusedID }
        let notAReader = try #require(refused.first { $0["user_identifier"] == "carol" && $0["audit_method"] == "ProvideTokenReplacement" })
        #expect(notAReader.message == "token refused")
        #expect(notAReader["audit_result"] == "refused")
        #expect(notAReader["audit_reason"] == "not a reader")
        #expect(notAReader["audit_caller_uid"] == "65534")
        #expect(notAReader["audit_token_sha256"] == nil, "a refusal released no token")
        #expect(refused.contains { $0["user_identifier"] == "nobody-here" && $0["audit_reason"] == "no such credential" })
        #expect(refused.contains { $0["user_identifier"] == "carol" && $0["audit_method"] == "Watch" })
        try await daemon.stop()
        #expect(!daemon.log.contains(access))
    }

    @Test func aRefusedLoopOnOneConnectionIsOneRecordAndACount() async throws {
        let daemon = try DaemonProcess(configuration: Self.auditOn)
        try await daemon.start()
        let script = """
            import socket, sys
            \(OtherUser.pythonExchange)
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(10)
            s.connect(sys.argv[1])
            for _ in range(40):
                exchange(s, sys.argv[2].encode())
            """
        let result = try await runCommand(
            "/usr/bin/setpriv",
            [
                "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c", script, daemon.socketPath,
                Tokens.tokenCall(user: "ghost"),
            ])
        #expect(result.status == 0, "\(result.stderr)")
        let records = try await Self.waitForRecords(daemon) { records in records.contains { $0["audit_count"] == "40" } }
        let ghost = records.filter { $0["user_identifier"] == "ghost" }
        #expect(ghost.map { $0["audit_count"] } == ["1", "40"], "\(ghost)")
        try await daemon.stop()
    }

    @Test func aRefreshedTokenClosesTheCountOfTheOldOneAndAnEndedLoginIsRefused() async throws {
        let directory = try ScratchDirectory()
        // Each refresh gives a new token; the login ends when the `ended` file exists.
        let command = try ExecProviderTests.script(
            in: directory,
            output: """
                json.dumps({"error": "invalid_grant", "error_description": "session revoked"}) if os.path.exists(\(String(reflecting: directory.file("ended")))) else json.dumps({"access_token": "REFRESHED-" + str(time.time_ns()), "token_type": "Bearer", "expires_in": 3600, "refresh_token": "NEXT-REFRESH-" + str(time.time_ns())})
                """)
        try directory.write(
            "refresh",
            try String(contentsOfFile: command, encoding: .utf8).replacingOccurrences(
                of: "sys.exit(0)", with: "sys.exit(1 if os.path.exists(\(String(reflecting: directory.file("ended")))) else 0)"),
            mode: 0o755)
        let daemon = try DaemonProcess(configuration: ExecProviderTests.config(command: command) + Self.auditTable, directory: directory)
        try await daemon.start()
        let client = try RawClient(path: daemon.socketPath)
        let access = Tokens.random("FIRST-ACCESS-")
        try #require(
            try client.call(Tokens.addCall(user: "dave", access: access, refresh: "FIRST-REFRESH-x", expiresIn: 3600)).errorName == nil)
        for _ in 0..<3 { #expect(try client.call(Tokens.tokenCall(user: "dave")).accessToken == access) }
        // A caller that needs more validity than the token has: refreshed while it waits.
        let refreshed = try #require(try client.call(Tokens.tokenCall(user: "dave", minValid: 7200)).accessToken)
        #expect(refreshed.hasPrefix("REFRESHED-"))
        var records = try await Self.waitForRecords(daemon) { records in
            records.contains { $0["user_identifier"] == "dave" && $0["audit_count"] == "3" }
        }
        let dave = records.filter { $0["user_identifier"] == "dave" }
        // First token: its first release, then its total when the new one was released; then the new one.
        #expect(dave.map { $0["audit_count"] } == ["1", "3", "1"], "\(dave)")
        #expect(dave[0]["audit_token_sha256"] == (try await Self.fingerprint(access)))
        #expect(dave[1]["audit_token_sha256"] == dave[0]["audit_token_sha256"])
        #expect(dave[2]["audit_token_sha256"] == (try await Self.fingerprint(refreshed)))

        // The login ends (a refresh is told invalid_grant): a call that waited on that refresh is
        // refused, on a connection of its own, and so is the next call.
        try directory.write("ended", "")
        let deadline = ContinuousClock.now + .seconds(20)
        var ended = false
        do {
            let waiter = try RawClient(path: daemon.socketPath)
            while !ended, ContinuousClock.now < deadline {
                ended =
                    try waiter.call(Tokens.tokenCall(user: "dave", minValid: 7200)).errorName
                    == "io.tokend.TokenProvider.ReauthenticationRequired"
                if !ended { try await Task.sleep(for: .milliseconds(200)) }
            }
        }
        #expect(ended)
        #expect(try client.call(Tokens.tokenCall(user: "dave")).errorName == "io.tokend.TokenProvider.ReauthenticationRequired")
        records = try await Self.waitForRecords(daemon) { records in
            records.filter { $0["user_identifier"] == "dave" && $0["audit_reason"] == "the login has ended" }.count >= 2
        }
        let refusals = records.filter { $0["user_identifier"] == "dave" && $0["audit_reason"] == "the login has ended" }
        #expect(refusals.contains { $0["audit_connection"] != dave[0]["audit_connection"] }, "the waiter's refusal: \(refusals)")
        #expect(refusals.contains { $0["audit_connection"] == dave[0]["audit_connection"] }, "the next call's: \(refusals)")
        try await daemon.stop()
        let log = daemon.log
        #expect(!log.contains(access))
        #expect(!log.contains(refreshed))
        #expect(!log.contains("REFRESH-"), "no refresh token in any line")
    }

    @Test func watchUpdatesAndTokenFilesAreReleases() async throws {
        let (directory, daemon) = try await DaemonProcess.startWithTokenFile(user: "erin", mode: "0600", extra: Self.auditTable)
        let admin = try RawClient(path: daemon.socketPath)
        let first = Tokens.random("FIRST-")
        try #require(try admin.call(Tokens.addCall(user: "erin", access: first, refresh: nil)).errorName == nil)
        let watcher = try RawClient(path: daemon.socketPath)
        try watcher.send(#"{"method":"io.tokend.TokenProvider.Watch","parameters":{"userIdentifier":"erin"},"more":true}"#)
        #expect(try RawClient.object(try #require(try watcher.receive())).accessToken == first)
        let second = Tokens.random("SECOND-")
        var replace = try RawClient.object(Tokens.addCall(user: "erin", access: second, refresh: nil))
        var parameters = replace["parameters"] as! [String: Any]
        parameters["replace"] = true
        replace["parameters"] = parameters
        #expect(try admin.call(String(decoding: try JSONSerialization.data(withJSONObject: replace), as: UTF8.self)).errorName == nil)
        #expect(try RawClient.object(try #require(try watcher.receive())).accessToken == second)
        let (firstPrint, secondPrint) = (try await Self.fingerprint(first), try await Self.fingerprint(second))
        let records = try await Self.waitForRecords(daemon) { records in
            records.filter { $0["audit_method"] == "TokenFile" }.count >= 2 && records.filter { $0["audit_method"] == "Watch" }.count >= 2
        }
        let watch = records.filter { $0["audit_method"] == "Watch" }
        #expect(watch.map { $0["audit_token_sha256"] } == [firstPrint, secondPrint])
        #expect(watch.allSatisfy { $0["audit_caller_pid"] == "\(getpid())" && $0["message_id"] == Self.releasedID })
        let files = records.filter { $0["audit_method"] == "TokenFile" }
        #expect(files.map { $0["audit_token_sha256"] } == [firstPrint, secondPrint])
        #expect(files.allSatisfy { $0["audit_path"] == directory.file("tokens/erin") && $0["user_identifier"] == "erin" })
        try await daemon.stop()
        #expect(!daemon.log.contains(first) && !daemon.log.contains(second))
    }

    @Test func dpopProofsAreReleasesOfTheirToken() async throws {
        let (daemon, client, token) = try await DPoPProofCallTests.start(extra: Self.auditTable)
        for _ in 0..<3 { #expect(try client.call(DPoPProofCallTests.proofCall()).errorName == nil) }
        let records = try await Self.waitForRecords(daemon) { records in records.contains { $0["audit_method"] == "ProvideDPoPProof" } }
        let proof = try #require(records.first { $0["audit_method"] == "ProvideDPoPProof" })
        #expect(proof["user_identifier"] == "alice")
        #expect(proof["audit_token_sha256"] == (try await Self.fingerprint(token)))
        #expect(records.filter { $0["audit_method"] == "ProvideDPoPProof" }.count == 1, "repeats are counted, not recorded")
        try await daemon.stop()
        #expect(!daemon.log.contains(token))
    }

    /// A token narrowed to a scope (django-oauth-toolkit mints it) is a release of its own: its
    /// fingerprint is the narrowed token's, and the record says what was asked for.
    @Test func aNarrowedTokenIsAReleaseWithItsRequest() async throws {
        let setup = try await IdPDaemon.start(providerExtra: NarrowedTokenTests.narrowed + Self.auditTable)
        let client = try RawClient(path: setup.daemon.socketPath)
        let minted = try await NarrowedTokenTests.enrol(setup, "alice", client: client)
        let reply = try client.call(Tokens.tokenCall(user: "alice", scope: "read"))
        let narrowed = try #require(reply.accessToken, "\(reply) \(setup.daemon.log.suffix(2000))")
        #expect(narrowed != minted["access_token"] as? String)
        #expect(try client.call(Tokens.tokenCall(user: "alice", scope: "read")).accessToken == narrowed)
        let records = try await Self.waitForRecords(setup.daemon) { records in records.contains { $0["audit_scope"] != nil } }
        let released = records.filter { $0["audit_scope"] != nil }
        #expect(released.count == 1, "the second read is counted: \(released)")
        let record = try #require(released.first)
        #expect(record["message_id"] == Self.releasedID)
        #expect(record["audit_method"] == "ProvideTokenReplacement")
        #expect(record["audit_scope"] == "read")
        #expect(record["user_identifier"] == "alice")
        #expect(record["audit_token_sha256"] == (try await Self.fingerprint(narrowed)))
        #expect(record["audit_caller_uid"] == "\(getuid())")
        try await setup.stop()
        #expect(!setup.daemon.log.contains(narrowed))
        #expect(!setup.daemon.log.contains(minted["refresh_token"] as? String ?? "no refresh token minted"))
    }

    @Test(.enabled(if: CgroupHierarchy.root != nil, "no writable cgroup v2 hierarchy (root needed)"))
    func loadCredentialDeliveriesAndRefusalsAreRecords() async throws {
        let units = try ProgramReaderTests.Units(more: ["backup.service"])
        let token = Tokens.random("LC-ACCESS-")
        let daemon = try await LoadCredentialTests.daemon(
            [("svc", ["unit:backup.service"], token)], configuration: LoadCredentialTests.configuration() + Self.auditTable)
        let socket = daemon.directory.file("credential.sock")
        let read = try await LoadCredentialTests.load(
            socket, name: LoadCredentialTests.systemdName(unit: "backup.service", id: "svc"), unit: "backup.service", units: units)
        #expect(read == token)
        let refused = try await LoadCredentialTests.load(
            socket, name: LoadCredentialTests.systemdName(unit: "other.service", id: "svc"), unit: "other.service", units: units)
        #expect(refused == "")
        let records = try await Self.waitForRecords(daemon) { records in
            records.filter { $0["audit_method"] == "LoadCredential" }.count >= 2
        }
        let loads = records.filter { $0["audit_method"] == "LoadCredential" }
        let delivered = try #require(loads.first { $0["message_id"] == Self.releasedID })
        #expect(delivered["user_identifier"] == "svc")
        #expect(delivered["audit_caller_unit"] == "backup.service")
        #expect(delivered["audit_credential_id"] == "svc")
        #expect(delivered["audit_caller_uid"] == "0")
        #expect(delivered["audit_token_sha256"] == (try await Self.fingerprint(token)))
        let denied = try #require(loads.first { $0["message_id"] == Self.refusedID })
        #expect(denied["audit_caller_unit"] == "other.service")
        #expect(denied["audit_reason"]?.isEmpty == false)
        #expect(denied["audit_token_sha256"] == nil)
        _ = try await daemon.stop()
        await units.remove()
        #expect(!daemon.log.contains(token))
    }

    /// Off by default, and off when said so.
    @Test(arguments: ["", "\n[audit]\nenabled = false\n"])
    func theAuditTrailIsOffUnlessTurnedOn(table: String) async throws {
        let daemon = try DaemonProcess(configuration: DaemonProcess.configuration() + table)
        try await daemon.start()
        do {
            let client = try RawClient(path: daemon.socketPath)
            try #require(try client.call(Tokens.addCall(user: "frank", access: Tokens.random("A-"), refresh: nil)).errorName == nil)
            for _ in 0..<3 { #expect(try client.call(Tokens.tokenCall(user: "frank")).accessToken != nil) }
        }
        _ = try await OtherUser.call(Tokens.tokenCall(user: "frank"), socket: daemon.socketPath, uid: 65534, gid: 65534)
        try await daemon.stop()
        #expect(daemon.log.contains("credential added"))
        #expect(Self.records(daemon.log).isEmpty)
    }
}

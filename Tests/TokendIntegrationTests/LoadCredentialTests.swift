import Foundation
import Testing
import TokendTestSupport

/// The `LoadCredential=` socket against the real daemon, without systemd as PID 1: a client does
/// what systemd's helper does (binds `\0<random>/unit/<unit>/<ID>`, connects, shuts its side,
/// reads to the end) from a process the test puts in a cgroup named as systemd names units
/// (``ProgramReaderTests/Units``), as root or another uid. The same with the real systemd 252 is
/// in the real-host layer (`Tests/realhost`).
@Suite(.serialized, .enabled(if: CgroupHierarchy.root != nil, "no writable cgroup v2 hierarchy (root needed)"))
struct LoadCredentialTests {
    static let otherUID: UInt32 = 7230

    /// systemd's side: `argv[1]` the socket, `argv[2]` the abstract name (without its NUL; empty:
    /// unbound); prints what it read, and `EACCES` when it may not connect.
    static let helper = #"""
        import errno, socket, sys
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(60)
        if sys.argv[2]:
            s.bind("\0" + sys.argv[2])
        try:
            s.connect(sys.argv[1])
        except PermissionError:
            sys.stdout.write("EACCES"); sys.exit(0)
        s.shutdown(socket.SHUT_WR)
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        sys.stdout.write(data.decode())
        """#

    /// A random part as systemd writes it (`%PRIx64`).
    static func systemdName(unit: String, id: String) -> String {
        String(UInt64.random(in: 1...UInt64.max), radix: 16) + "/unit/\(unit)/\(id)"
    }

    /// What the helper read, connecting from `unit` of `units` as `uid` with `name` bound.
    static func load(
        _ socket: String, name: String, unit: String, units: ProgramReaderTests.Units, uid: UInt32 = 0
    ) async throws -> String {
        try await ProgramReaderTests.client(Self.helper, [socket, name], unit: unit, units: units, uid: uid)
    }

    static func configuration(_ loadCredential: String = "", providers: String = DaemonProcess.defaultProviders) -> String {
        DaemonProcess.configuration(providers: providers) + """

            [load_credential]
            socket = "credential.sock"
            \(loadCredential)
            """
    }

    /// A started daemon with the `LoadCredential=` socket and `credentials` (name, readers,
    /// access token) added by root.
    static func daemon(
        _ credentials: [(String, [String], String)], configuration: String = LoadCredentialTests.configuration()
    ) async throws -> DaemonProcess {
        let daemon = try DaemonProcess(configuration: configuration)
        try await Self.start(daemon)
        let root = try RawClient(path: daemon.socketPath)
        for (name, readers, access) in credentials {
            let added = try root.call(Tokens.addCall(user: name, access: access, refresh: "r-\(name)", readers: readers))
            #expect(added.errorName == nil, "\(added)")
        }
        return daemon
    }

    /// Starts `daemon` and waits until all its sockets listen: the public one, which `start()`
    /// waits for, is bound first; the ready line comes after the last.
    static func start(_ daemon: DaemonProcess) async throws {
        try await daemon.start()
        try await pollUntil(timeout: .seconds(30), "the ready line: \(daemon.log.suffix(2000))") { daemon.log.contains("tokend ready") }
    }

    /// The daemon's `LoadCredential` log lines.
    static func records(_ daemon: DaemonProcess) -> [Substring] {
        daemon.log.split(separator: "\n").filter { $0.contains("LoadCredential:") }
    }

    /// Waits for the record of a request for `id` from `unit` with `result` (and `reason`).
    static func expectRecord(
        _ daemon: DaemonProcess, unit: String, id: String, result: String, reason: String? = nil,
        sourceLocation: SourceLocation = #_sourceLocation
    ) async throws {
        try await pollUntil(timeout: .seconds(10), "a record \(unit) \(id) \(result) \(reason ?? ""): \(records(daemon))") {
            records(daemon).contains { line in
                line.contains("unit=\(unit)") && line.contains("credential_id=\(id)") && line.contains("result=\(result)")
                    && (reason.map { line.contains("reason=\($0)") } ?? true)
            }
        }
    }

    @Test func aUnitNamedByAReaderReadsTheCurrentToken() async throws {
        let units = try ProgramReaderTests.Units(more: ["backup.service"])
        let token = Tokens.random("lc-")
        let daemon = try await Self.daemon([("svc", ["unit:backup.service"], token)])
        let socket = daemon.directory.file("credential.sock")
        // Root's only, as the service manager is: 0600, tokend's own (root here).
        var info = stat()
        #expect(stat(socket, &info) == 0 && info.st_mode & 0o777 == 0o600 && info.st_uid == getuid(), "\(info.st_mode)")

        let read = try await Self.load(
            socket, name: Self.systemdName(unit: "backup.service", id: "svc"), unit: "backup.service", units: units)
        #expect(read == token, "\(read) \(daemon.log.suffix(2000))")
        try await Self.expectRecord(daemon, unit: "backup.service", id: "svc", result: "delivered")
        let line = Self.records(daemon).first { $0.contains("result=delivered") } ?? ""
        #expect(line.contains("user_identifier=svc") && line.contains("format=token") && line.contains("expires_at="), "\(line)")
        #expect(!daemon.log.contains(token), "the token must never be logged")
        // The public socket keeps working beside it.
        #expect(try RawClient(path: daemon.socketPath).call(Tokens.tokenCall(user: "svc")).errorName != nil)
        _ = try await daemon.stop()
        await units.remove()
    }

    @Test func aUnitTheReadersDoNotNameGetsNothing() async throws {
        let units = try ProgramReaderTests.Units(more: ["backup.service"])
        let daemon = try await Self.daemon([
            ("svc", ["unit:backup.service"], Tokens.random("lc-")), ("rootonly", ["uid:0"], Tokens.random("lc-")),
            ("joined", ["uid:0+unit:backup.service"], Tokens.random("lc-")),
        ])
        let socket = daemon.directory.file("credential.sock")
        // Another unit asking for the credential under its own name.
        #expect(
            try await Self.load(socket, name: Self.systemdName(unit: "other.service", id: "svc"), unit: "other.service", units: units) == ""
        )
        try await Self.expectRecord(daemon, unit: "other.service", id: "svc", result: "refused", reason: "not_a_reader")
        // Root as a reader, or root joined to the unit, is no unit reader: the helper is root for every unit.
        for id in ["rootonly", "joined"] {
            #expect(
                try await Self.load(socket, name: Self.systemdName(unit: "backup.service", id: id), unit: "backup.service", units: units)
                    == "")
            try await Self.expectRecord(daemon, unit: "backup.service", id: id, result: "refused", reason: "not_a_reader")
        }
        // A credential that does not exist.
        #expect(
            try await Self.load(socket, name: Self.systemdName(unit: "backup.service", id: "nope"), unit: "backup.service", units: units)
                == "")
        try await Self.expectRecord(daemon, unit: "backup.service", id: "nope", result: "refused", reason: "no_such_credential")
        _ = try await daemon.stop()
        await units.remove()
    }

    /// Anyone can bind any abstract name: root in another unit, root in a user's manager, the
    /// unit's own processes as another uid, and a name not systemd's all get nothing.
    @Test func aProcessThatBindsTheNameItselfGetsNothing() async throws {
        let userManager = "user@\(Self.otherUID).service"
        let units = try ProgramReaderTests.Units(more: [
            "backup.service", userManager, userManager + "/app.slice", userManager + "/app.slice/backup.service",
        ])
        let token = Tokens.random("lc-")
        let daemon = try await Self.daemon([("svc", ["unit:backup.service"], token)])
        let socket = daemon.directory.file("credential.sock")
        let systemdName = Self.systemdName(unit: "backup.service", id: "svc")

        // Root outside the unit, with the issue's name and with one of systemd's form.
        #expect(try await Self.load(socket, name: "x/unit/backup.service/svc", unit: "other.service", units: units) == "")
        try await Self.expectRecord(daemon, unit: "-", id: "-", result: "refused", reason: "malformed_name")
        #expect(try await Self.load(socket, name: systemdName, unit: "other.service", units: units) == "")
        try await Self.expectRecord(daemon, unit: "backup.service", id: "svc", result: "refused", reason: "other_unit")
        #expect(try await Self.load(socket, name: "", unit: "backup.service", units: units) == "")
        try await Self.expectRecord(daemon, unit: "-", id: "-", result: "refused", reason: "unnamed_peer")
        // Root in a user's manager, in a unit of that name there.
        #expect(try await Self.load(socket, name: systemdName, unit: userManager + "/app.slice/backup.service", units: units) == "")
        #expect(Self.records(daemon).contains { $0.contains("reason=other_unit") && $0.contains(userManager) }, "\(Self.records(daemon))")

        // Another user cannot even connect: the socket is root's.
        #expect(try await Self.load(socket, name: systemdName, unit: "backup.service", units: units, uid: Self.otherUID) == "EACCES")
        // With a mode someone opened, the uid check refuses: the unit's own process as its user,
        // and a user's manager asking for its unit of the same name.
        #expect(chmod(socket, 0o666) == 0)
        for unit in ["backup.service", userManager + "/app.slice/backup.service"] {
            for name in [systemdName, "x/unit/backup.service/svc"] {
                let read = try await Self.load(socket, name: name, unit: unit, units: units, uid: Self.otherUID)
                #expect(read == "", "\(unit) \(name): \(read)")
            }
        }
        try await Self.expectRecord(daemon, unit: "backup.service", id: "svc", result: "refused", reason: "not_system_manager")
        #expect(!Self.records(daemon).contains { $0.contains("result=delivered") }, "\(Self.records(daemon))")
        #expect(!daemon.log.contains(token))
        // The unit itself, as root, still reads.
        #expect(try await Self.load(socket, name: systemdName, unit: "backup.service", units: units) == token)
        _ = try await daemon.stop()
        await units.remove()
    }

    /// `load_credential.ids` maps an ID to another credential and to the JSON form.
    @Test func idsMapToACredentialAndAForm() async throws {
        let units = try ProgramReaderTests.Units(more: ["backup.service"])
        let token = Tokens.random("lc-")
        let configuration = Self.configuration(
            """
            [load_credential.ids.api-token]
            credential = "backup"
            [load_credential.ids.api-json]
            credential = "backup"
            format = "json"
            """)
        let daemon = try await Self.daemon([("backup", ["unit:backup.service"], token)], configuration: configuration)
        let socket = daemon.directory.file("credential.sock")
        func load(_ id: String) async throws -> String {
            try await Self.load(socket, name: Self.systemdName(unit: "backup.service", id: id), unit: "backup.service", units: units)
        }
        #expect(try await load("api-token") == token)
        #expect(try await load("backup") == token)
        let json = try RawClient.object(try await load("api-json"))
        #expect(json["accessToken"] as? String == token && json["userIdentifier"] as? String == "backup", "\(json)")
        #expect(json["tokenType"] as? String == "Bearer" && (json["expiresAt"] as? Int ?? 0) > Int(Date().timeIntervalSince1970) + 3000)
        try await Self.expectRecord(daemon, unit: "backup.service", id: "api-json", result: "delivered")
        #expect(Self.records(daemon).contains { $0.contains("credential_id=api-json") && $0.contains("format=json") })

        // A reload changes what IDs name, in place.
        try daemon.directory.write("tokend.toml", Self.configuration("format = \"json\""))
        daemon.send(signal: SIGHUP)
        try await pollUntil(timeout: .seconds(30), "the reload: \(daemon.log.suffix(1000))") {
            daemon.log.contains("configuration reloaded")
        }
        #expect(try await load("api-token") == "")
        try await Self.expectRecord(daemon, unit: "backup.service", id: "api-token", result: "refused", reason: "no_such_credential")
        #expect(try RawClient.object(try await load("backup"))["accessToken"] as? String == token)
        _ = try await daemon.stop()
        await units.remove()
    }

    /// A token valid for less than `min_valid` is refreshed first (one grant, through the exec
    /// provider's command); a refresh that takes longer than `timeout` ends in nothing written,
    /// within the timeout.
    @Test func aShortLivedTokenIsRefreshedFirstAndASlowRefreshIsBounded() async throws {
        let units = try ProgramReaderTests.Units(more: ["backup.service"])
        let directory = try ScratchDirectory()
        let command = try ExecProviderTests.script(
            in: directory, sleep: 0,
            output: #"json.dumps({"access_token": "fresh-" + str(now) + "-" + str(os.getpid()), "expires_in": 3600})"#)
        // The command may take longer than a delivery waits.
        let providers = """
            [providers.example]
            kind = "exec"
            command = ["\(command)"]
            timeout = "10s"
            """
        let daemon = try DaemonProcess(
            configuration: Self.configuration("min_valid = \"10m\"\ntimeout = \"2s\"", providers: providers), directory: directory)
        try await Self.start(daemon)
        let root = try RawClient(path: daemon.socketPath)
        let old = Tokens.random("old-")
        #expect(
            try root.call(Tokens.addCall(user: "svc", access: old, refresh: "r", expiresIn: 300, readers: ["unit:backup.service"]))
                .errorName == nil)
        let socket = daemon.directory.file("credential.sock")
        let name = Self.systemdName(unit: "backup.service", id: "svc")
        let read = try await Self.load(socket, name: name, unit: "backup.service", units: units)
        #expect(read.hasPrefix("fresh-"), "\(read) \(daemon.log.suffix(2000))")
        #expect(ExecProviderTests.calls(directory).count == 1)
        // Valid for an hour now: the next unit start gets it without a grant.
        #expect(try await Self.load(socket, name: name, unit: "backup.service", units: units) == read)
        #expect(ExecProviderTests.calls(directory).count == 1)

        // A refresh that never comes in time: the command sleeps past the timeout.
        _ = try ExecProviderTests.script(in: directory, sleep: 8, output: #"'{}'"#)
        #expect(
            try root.call(Tokens.addCall(user: "slow", access: old, refresh: "r", expiresIn: 300, readers: ["unit:backup.service"]))
                .errorName == nil)
        let started = ContinuousClock.now
        let nothing = try await Self.load(
            socket, name: Self.systemdName(unit: "backup.service", id: "slow"), unit: "backup.service", units: units)
        let waited = ContinuousClock.now - started
        #expect(nothing == "", "\(nothing)")
        #expect(waited >= .seconds(2) && waited < .seconds(8), "\(waited)")
        try await Self.expectRecord(daemon, unit: "backup.service", id: "slow", result: "refused", reason: "timed_out")
        #expect(!daemon.log.contains(old) && !daemon.log.contains(read))
        _ = try await daemon.stop()
        await units.remove()
    }

    /// Off unless configured: no socket, and nothing of it in the ready line.
    @Test func theSocketIsOptIn() async throws {
        let daemon = try DaemonProcess()
        try await Self.start(daemon)
        #expect(!FileManager.default.fileExists(atPath: daemon.directory.file("credential.sock")))
        let ready = daemon.log.split(separator: "\n").first { $0.contains("tokend ready") } ?? ""
        #expect(!ready.contains("load_credential_socket"), "\(ready)")
        _ = try await daemon.stop()

        let on = try DaemonProcess(configuration: Self.configuration())
        try await Self.start(on)
        let socket = on.directory.file("credential.sock")
        #expect(FileManager.default.fileExists(atPath: socket))
        #expect(on.log.contains("load_credential_socket=\(socket)"), "\(on.log)")
        _ = try await on.stop()
        // Removed at stop, as tokend's other sockets.
        #expect(!FileManager.default.fileExists(atPath: socket))
    }

    /// With socket activation the socket named `credential` (`tokend-credential.socket`) is
    /// served; on a kernel without `SO_PEERPIDFD` (Debian 12's own 6.1, emulated with a seccomp
    /// filter) the unit cannot be checked, so every request is refused and said why.
    @Test func aPassedSocketIsServedAndWithoutPeerPidfdEveryRequestIsRefused() async throws {
        let units = try ProgramReaderTests.Units(more: ["backup.service"])
        let token = Tokens.random("lc-")
        let daemon = try PassedSocketsDaemon()
        let socket = daemon.directory.file("passed.sock")
        let credential = daemon.directory.file("credential.sock")
        let sockets: [PassedSocketsDaemon.Socket] = [
            .init(path: socket, name: "varlink", mode: 0o666), .init(path: credential, name: "credential", mode: 0o600),
        ]
        try await daemon.start(sockets: sockets)
        #expect(
            try RawClient(path: socket).call(Tokens.addCall(user: "svc", access: token, refresh: "r", readers: ["unit:backup.service"]))
                .errorName == nil)
        let name = Self.systemdName(unit: "backup.service", id: "svc")
        #expect(try await Self.load(credential, name: name, unit: "backup.service", units: units) == token)
        try await daemon.stop()

        guard PassedSocketsDaemon.canHidePeerPidfd else { return await units.remove() }
        let old = try PassedSocketsDaemon(directory: daemon.directory)
        try await old.start(sockets: sockets, hidePeerPidfd: true)
        #expect(try await Self.load(credential, name: name, unit: "backup.service", units: units) == "")
        try await pollUntil(timeout: .seconds(10), "the refusal: \(old.log)") {
            old.log.split(separator: "\n").contains { $0.contains("reason=unit_unknown") && $0.contains("SO_PEERPIDFD") }
        }
        try await old.stop()
        await units.remove()
    }
}

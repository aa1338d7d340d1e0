import Foundation
import Testing
import TokendTestSupport

/// Readers by program (issue 32) against the real daemon, without systemd as PID 1: the tests
/// make cgroup v2 directories named as systemd names units (`tokend-test-….slice/demo.service`),
/// start each client in one (a root shell writes its pid to `cgroup.procs`, then execs
/// `setpriv` to the client's uid) and check what the daemon decides from the client's pidfd.
@Suite(.serialized, .enabled(if: CgroupHierarchy.root != nil, "no writable cgroup v2 hierarchy (root needed)"))
struct ProgramReaderTests {
    static let reader: UInt32 = 7210, other: UInt32 = 7220

    /// A slice with `demo.service` and `other.service` in it (and the cgroups `more` names,
    /// paths below the slice, parents first), removed at the end.
    final class Units: @unchecked Sendable {
        let slice: String
        private let directories: [String]

        /// In the cgroup v2 hierarchy, or in `root` (the legacy `name=systemd` one).
        init(root: String? = CgroupHierarchy.root, more: [String] = []) throws {
            guard let root else { throw TestFailure("no cgroup hierarchy") }
            let slice = root + "/tokend-test-\(UInt32.random(in: 0...UInt32.max)).slice"
            self.slice = slice
            directories = [slice] + (["demo.service", "other.service"] + more).map { slice + "/" + $0 }
            for directory in directories {
                guard mkdir(directory, 0o755) == 0 else { throw TestFailure("mkdir \(directory): errno \(errno)") }
            }
        }

        /// Removes the cgroups once their processes are gone (a cgroup with members cannot be
        /// removed; an exited client leaves it within moments).
        func remove() async {
            let deadline = ContinuousClock.now + .seconds(10)
            for directory in directories.reversed() {
                while rmdir(directory) != 0, errno == EBUSY, ContinuousClock.now < deadline {
                    try? await Task.sleep(for: .milliseconds(20))
                }
            }
        }
    }

    /// Runs `executable` with `arguments` as `uid` inside `unit` of `units`: a root shell joins
    /// the cgroup, then execs `setpriv`, which execs the client.
    static func run(_ executable: String, _ arguments: [String], unit: String, units: Units, uid: UInt32) async throws -> CommandResult {
        let procs = units.slice + "/" + unit + "/cgroup.procs"
        let command = #"echo $$ > "$0" && exec /usr/bin/setpriv --reuid="$1" --regid="$1" --clear-groups "${@:2}""#
        return try await runCommand("/bin/bash", ["-c", command, procs, "\(uid)", executable] + arguments, timeout: .seconds(60))
    }

    /// Runs `script` (arguments after it) with `python` as `uid` inside `unit` of `units`;
    /// returns its stdout.
    static func client(
        _ script: String, _ arguments: [String], unit: String, units: Units, uid: UInt32, python: String = "/usr/bin/python3"
    ) async throws -> String {
        let result = try await run(python, ["-c", script] + arguments, unit: unit, units: units, uid: uid)
        guard result.status == 0 else { throw TestFailure("client in \(unit) as uid \(uid) failed (\(result.status)): \(result.stderr)") }
        return result.stdout
    }

    /// Connects, sends the call read from argv[2], prints the reply.
    static let oneCall = """
        import socket, sys
        \(OtherUser.pythonExchange)
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(10)
        s.connect(sys.argv[1])
        sys.stdout.write(exchange(s, sys.argv[2].encode()).decode())
        """

    /// Connects, then hands the connection to a child and exits: the child waits until its
    /// parent (the process that connected) is gone, then calls on the inherited connection.
    static let callAfterTheConnectingProcessExited = """
        import os, socket, sys, time
        \(OtherUser.pythonExchange)
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(10)
        s.connect(sys.argv[1])
        parent = os.getpid()
        if os.fork() != 0:
            os._exit(0)
        deadline = time.time() + 10
        while os.getppid() == parent and time.time() < deadline:
            time.sleep(0.01)
        if os.getppid() == parent:
            sys.exit("the parent did not exit")
        sys.stdout.write(exchange(s, sys.argv[2].encode()).decode())
        """

    /// A daemon with credential `name` read by `readers` (a cached token, no provider needed).
    static func daemon(credentials: [(String, [String])]) async throws -> DaemonProcess {
        let daemon = try DaemonProcess()
        try await daemon.start()
        let root = try RawClient(path: daemon.socketPath)
        for (name, readers) in credentials {
            let added = try root.call(Tokens.addCall(user: name, access: Tokens.random("\(name)-"), refresh: nil, readers: readers))
            #expect(added.errorName == nil, "\(added)")
        }
        return daemon
    }

    static func token(
        _ name: String, daemon: DaemonProcess, unit: String, units: Units, uid: UInt32, python: String = "/usr/bin/python3",
        script: String = oneCall
    ) async throws -> [String: Any] {
        let out = try await client(
            script, [daemon.socketPath, Tokens.tokenCall(user: name)], unit: unit, units: units, uid: uid, python: python)
        return try RawClient.object(out)
    }

    static let permissionDenied = "io.tokend.TokenProvider.PermissionDenied"

    /// A copy of the Python interpreter in `directory` (a program whose contents a test may
    /// change), and its sha256.
    static func pythonCopy(in directory: ScratchDirectory) async throws -> (path: String, sha256: Substring) {
        let copy = directory.file("python-copy")
        try FileManager.default.copyItem(atPath: "/usr/bin/python3.11", toPath: copy)
        chmod(copy, 0o755)
        return (copy, try await runCommand("/usr/bin/sha256sum", [copy]).stdout.prefix(64))
    }

    @Test func theNamedUnitReadsAndAnotherUnitOfTheSameUidIsRefused() async throws {
        let units = try Units()
        let daemon = try await Self.daemon(credentials: [("backup", ["unit:demo.service"]), ("nothing", ["uid:\(Self.other)"])])
        let granted = try await Self.token("backup", daemon: daemon, unit: "demo.service", units: units, uid: Self.reader)
        #expect(granted.accessToken?.hasPrefix("backup-") == true, "\(granted) \(daemon.log.suffix(1500))")
        let refused = try await Self.token("backup", daemon: daemon, unit: "other.service", units: units, uid: Self.reader)
        #expect(refused.errorName == Self.permissionDenied, "\(refused)")
        // The same answer as for a credential the caller is no reader of at all.
        let plain = try await Self.token("nothing", daemon: daemon, unit: "other.service", units: units, uid: Self.reader)
        #expect(plain.errorName == refused.errorName)
        #expect(Set(plain.parameters.keys) == Set(refused.parameters.keys))
        #expect(daemon.log.contains("unit other.service is not demo.service"), "\(daemon.log.suffix(1500))")
        _ = try await daemon.stop()
        await units.remove()
    }

    @Test func aUnitJoinedToAUidRefusesTheUnitUnderAnotherUid() async throws {
        let units = try Units()
        let daemon = try await Self.daemon(credentials: [("backup", ["uid:\(Self.reader)+unit:demo.service"])])
        let granted = try await Self.token("backup", daemon: daemon, unit: "demo.service", units: units, uid: Self.reader)
        #expect(granted.accessToken != nil, "\(granted) \(daemon.log.suffix(1500))")
        let otherUID = try await Self.token("backup", daemon: daemon, unit: "demo.service", units: units, uid: Self.other)
        #expect(otherUID.errorName == Self.permissionDenied, "\(otherUID)")
        let otherUnit = try await Self.token("backup", daemon: daemon, unit: "other.service", units: units, uid: Self.reader)
        #expect(otherUnit.errorName == Self.permissionDenied, "\(otherUnit)")
        _ = try await daemon.stop()
        await units.remove()
    }

    /// A user's own manager names its units as it likes (`systemd-run --user
    /// --unit=demo.service`), and a `Delegate=yes` unit names its own sub-cgroups: neither is
    /// the system unit `demo.service`, alone or joined to the caller's uid.
    @Test func aUserManagersUnitOrADelegatedSubCgroupNamedLikeTheReaderIsRefused() async throws {
        let userManager = "user@\(Self.reader).service"
        let units = try Units(more: [
            userManager, userManager + "/app.slice", userManager + "/app.slice/demo.service", "other.service/demo.service",
        ])
        let daemon = try await Self.daemon(credentials: [
            ("backup", ["unit:demo.service"]), ("joined", ["uid:\(Self.reader)+unit:demo.service"]),
        ])
        for unit in [userManager + "/app.slice/demo.service", "other.service/demo.service"] {
            for name in ["backup", "joined"] {
                let refused = try await Self.token(name, daemon: daemon, unit: unit, units: units, uid: Self.reader)
                #expect(refused.errorName == Self.permissionDenied, "\(name) from \(unit): \(refused)")
            }
        }
        #expect(daemon.log.contains("unit \(userManager) is not demo.service"), "\(daemon.log.suffix(1500))")
        #expect(daemon.log.contains("unit other.service is not demo.service"), "\(daemon.log.suffix(1500))")
        // The system unit itself still reads.
        let granted = try await Self.token("backup", daemon: daemon, unit: "demo.service", units: units, uid: Self.reader)
        #expect(granted.accessToken != nil, "\(granted) \(daemon.log.suffix(1500))")
        _ = try await daemon.stop()
        await units.remove()
    }

    @Test func anExecutableWhoseContentsChangedIsRefused() async throws {
        let units = try Units()
        let directory = try ScratchDirectory()
        let (copy, hash) = try await Self.pythonCopy(in: directory)
        let daemon = try await Self.daemon(credentials: [
            ("pinned", ["exe:\(copy)@sha256:\(hash)"]), ("path", ["exe:\(copy)"]),
        ])
        let granted = try await Self.token("pinned", daemon: daemon, unit: "demo.service", units: units, uid: Self.reader, python: copy)
        #expect(granted.accessToken != nil, "\(granted) \(daemon.log.suffix(1500))")
        let otherProgram = try await Self.token("path", daemon: daemon, unit: "demo.service", units: units, uid: Self.reader)
        #expect(otherProgram.errorName == Self.permissionDenied, "\(otherProgram)")
        // The same path, other contents (a byte appended to the ELF file still runs).
        let handle = try #require(FileHandle(forWritingAtPath: copy))
        try handle.seekToEnd()
        try handle.write(contentsOf: Data([0]))
        try handle.close()
        let changed = try await Self.token("pinned", daemon: daemon, unit: "demo.service", units: units, uid: Self.reader, python: copy)
        #expect(changed.errorName == Self.permissionDenied, "\(changed)")
        #expect(daemon.log.contains("executable \(copy) has a different sha256"), "\(daemon.log.suffix(1500))")
        let samePath = try await Self.token("path", daemon: daemon, unit: "demo.service", units: units, uid: Self.reader, python: copy)
        #expect(samePath.accessToken != nil, "\(samePath)")
        _ = try await daemon.stop()
        await units.remove()
    }

    /// The owner of an executable rewrites it in place (same inode, same size) and sets its
    /// modification time back (`touch -d`): its inode's change time, which no owner can set,
    /// moves on, so tokend hashes it again rather than reusing the hash of what it was.
    @Test func anExecutableRewrittenInPlaceWithItsOldTimesIsHashedAgain() async throws {
        let units = try Units()
        let directory = try ScratchDirectory()
        let (copy, hash) = try await Self.pythonCopy(in: directory)
        let daemon = try await Self.daemon(credentials: [("pinned", ["exe:\(copy)@sha256:\(hash)"])])
        let granted = try await Self.token("pinned", daemon: daemon, unit: "demo.service", units: units, uid: Self.reader, python: copy)
        #expect(granted.accessToken != nil, "\(granted) \(daemon.log.suffix(1500))")
        var before = stat()
        #expect(stat(copy, &before) == 0)
        // One byte of a section name in the section header string table, which is never loaded:
        // the program still runs, with other contents.
        let contents = try Data(contentsOf: URL(fileURLWithPath: copy))
        let name = try #require(contents.ranges(of: Data(".gnu_debuglink".utf8)).last)
        let handle = try #require(FileHandle(forUpdatingAtPath: copy))
        try handle.seek(toOffset: UInt64(name.upperBound - 1))
        try handle.write(contentsOf: Data("K".utf8))
        try handle.close()
        var times = [before.st_atim, before.st_mtim]
        #expect(utimensat(AT_FDCWD, copy, &times, 0) == 0)
        var after = stat()
        #expect(stat(copy, &after) == 0)
        #expect(after.st_ino == before.st_ino && after.st_size == before.st_size)
        #expect(after.st_mtim.tv_sec == before.st_mtim.tv_sec && after.st_mtim.tv_nsec == before.st_mtim.tv_nsec)
        let rewritten = try await runCommand("/usr/bin/sha256sum", [copy]).stdout.prefix(64)
        #expect(rewritten != hash)
        let changed = try await Self.token("pinned", daemon: daemon, unit: "demo.service", units: units, uid: Self.reader, python: copy)
        #expect(changed.errorName == Self.permissionDenied, "\(changed)")
        #expect(daemon.log.contains("executable \(copy) has a different sha256"), "\(daemon.log.suffix(1500))")
        _ = try await daemon.stop()
        await units.remove()
    }

    /// The connecting process exits, leaving the connection to its child, which asks: the child
    /// did not connect (whatever process may since have the connector's pid).
    @Test func aCallAfterTheConnectingProcessExitedIsRefused() async throws {
        let units = try Units()
        let daemon = try await Self.daemon(credentials: [("backup", ["unit:demo.service"])])
        let refused = try await Self.token(
            "backup", daemon: daemon, unit: "demo.service", units: units, uid: Self.reader, script: Self.callAfterTheConnectingProcessExited
        )
        #expect(refused.errorName == Self.permissionDenied, "\(refused)")
        #expect(daemon.log.contains("not by the process that connected"), "\(daemon.log.suffix(1500))")
        _ = try await daemon.stop()
        await units.remove()
    }

    /// Status tells a person which unit and executable tokend saw, to debug a refused program.
    @Test func statusShowsTheCallersUnitAndExecutable() async throws {
        let units = try Units()
        let daemon = try await Self.daemon(credentials: [])
        let status = #"{"method":"io.tokend.TokenProvider.Status","parameters":{}}"#
        let reply = try RawClient.object(
            try await Self.client(Self.oneCall, [daemon.socketPath, status], unit: "demo.service", units: units, uid: Self.reader))
        let caller = try #require((reply.parameters["daemon"] as? [String: Any])?["caller"] as? [String: Any], "\(reply)")
        #expect(caller["unit"] as? String == "demo.service")
        #expect(caller["executable"] as? String == URL(fileURLWithPath: "/usr/bin/python3").resolvingSymlinksInPath().path)
        let tokenctl = URL(fileURLWithPath: Repository.binary("tokenctl")).resolvingSymlinksInPath().path
        let printed = try await Self.run(
            tokenctl, ["status", "--socket", daemon.socketPath], unit: "other.service", units: units, uid: Self.reader)
        #expect(
            printed.stdout.contains("caller: uid=\(Self.reader) unit=other.service exe=\(tokenctl)"), "\(printed.stdout) \(printed.stderr)")
        _ = try await daemon.stop()
        await units.remove()
    }

    /// On a host whose systemd uses the legacy hierarchy (the process's cgroup v2 path is `/`),
    /// the unit comes from the `name=systemd` hierarchy.
    @Test(.enabled(if: CgroupHierarchy.legacySystemdRoot != nil, "no writable name=systemd hierarchy"))
    func theLegacySystemdHierarchyNamesTheUnitWhenV2DoesNot() async throws {
        let units = try Units(root: CgroupHierarchy.legacySystemdRoot)
        let daemon = try await Self.daemon(credentials: [("backup", ["unit:demo.service"])])
        let granted = try await Self.token("backup", daemon: daemon, unit: "demo.service", units: units, uid: Self.reader)
        #expect(granted.accessToken != nil, "\(granted) \(daemon.log.suffix(1500))")
        let refused = try await Self.token("backup", daemon: daemon, unit: "other.service", units: units, uid: Self.reader)
        #expect(refused.errorName == Self.permissionDenied, "\(refused)")
        _ = try await daemon.stop()
        await units.remove()
    }

    /// Each connection's pidfd is closed with it: 300 connections, each checked against a
    /// program reader, leave the daemon with as many open descriptors as before them.
    @Test func pidfdsAreClosedWithTheirConnections() async throws {
        let daemon = try await Self.daemon(credentials: [("backup", ["unit:demo.service"])])
        let pid = daemon.process.processIdentifier
        func descriptors() -> Int { (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd").count) ?? -1 }
        func pidfds() -> Int {
            let links = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd")) ?? []
            return links.filter {
                (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/fd/\($0)")) == "anon_inode:[pidfd]"
            }
            .count
        }
        // The connection that added the credential closes in the background: wait for it.
        let settled = ContinuousClock.now + .seconds(20)
        while pidfds() > 0, ContinuousClock.now < settled { try await Task.sleep(for: .milliseconds(50)) }
        let before = descriptors()
        for _ in 0..<300 {
            let client = try RawClient(path: daemon.socketPath)
            let reply = try client.call(Tokens.tokenCall(user: "backup"))
            #expect(reply.errorName == Self.permissionDenied, "\(reply)")
        }
        let deadline = ContinuousClock.now + .seconds(20)
        while descriptors() > before || pidfds() > 0, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(50)) }
        #expect(descriptors() == before, "\(descriptors()) open descriptors, \(before) before")
        #expect(pidfds() == 0)
        _ = try await daemon.stop()
    }

    @Test func aUidOnlyCredentialIsUnaffected() async throws {
        let units = try Units()
        let daemon = try await Self.daemon(credentials: [("mine", ["uid:\(Self.reader)"])])
        for unit in ["demo.service", "other.service"] {
            let granted = try await Self.token("mine", daemon: daemon, unit: unit, units: units, uid: Self.reader)
            #expect(granted.accessToken != nil, "\(unit): \(granted)")
            let refused = try await Self.token("mine", daemon: daemon, unit: unit, units: units, uid: Self.other)
            #expect(refused.errorName == Self.permissionDenied, "\(unit): \(refused)")
        }
        #expect(!daemon.log.contains("program readers not checked"))
        _ = try await daemon.stop()
        await units.remove()
    }
}

enum CgroupHierarchy {
    /// The legacy `name=systemd` hierarchy's mount point, where this process's cgroup v2 path is
    /// `/` (so that the legacy one is what names a unit) and cgroups can be made there.
    static let legacySystemdRoot: String? = {
        guard let own = try? String(contentsOfFile: "/proc/self/cgroup", encoding: .utf8),
            own.contains("\n0::/\n") || own.hasPrefix("0::/\n")
        else { return nil }
        return writableMount { $0.hasPrefix("cgroup ") && $0.contains("name=systemd") }
    }()

    /// The cgroup v2 mount point (`/sys/fs/cgroup`, or `/sys/fs/cgroup/unified` on a hybrid
    /// layout), if this process may create cgroups there.
    static let root: String? = writableMount { $0.hasPrefix("cgroup2 ") }

    /// The first read-write mount whose `FSTYPE SOURCE SUPEROPTIONS` part `matches` and in which
    /// this process (root) may make a cgroup.
    static func writableMount(where matches: (String) -> Bool) -> String? {
        guard getuid() == 0, let mounts = try? String(contentsOfFile: "/proc/self/mountinfo", encoding: .utf8) else { return nil }
        for line in mounts.split(separator: "\n") {
            // ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS … - FSTYPE SOURCE SUPEROPTIONS
            let halves = line.components(separatedBy: " - ")
            guard halves.count == 2, matches(halves[1]) else { continue }
            let fields = halves[0].split(separator: " ")
            guard fields.count > 5, fields[5].hasPrefix("rw") else { continue }
            let root = String(fields[4])
            let probe = root + "/tokend-probe-\(getpid()).slice"
            guard mkdir(probe, 0o755) == 0 else { continue }
            rmdir(probe)
            return root
        }
        return nil
    }
}

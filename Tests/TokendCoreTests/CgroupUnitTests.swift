import Testing
import TokendCore

/// Which unit a process is in, from the text of `/proc/PID/cgroup`: only the unit the system
/// manager put it in (the first `.service` or `.scope` below the slices), never a unit of a
/// user's own manager (`user@UID.service/…`) nor a sub-cgroup a delegated unit made and named.
struct CgroupUnitTests {
    @Test(
        arguments: [
            // System units, in slices at any depth.
            ("0::/system.slice/backup.service\n", "backup.service"),
            ("0::/system.slice/system-getty.slice/getty@tty1.service\n", "getty@tty1.service"),
            (#"0::/system.slice/system-systemd\x2dcryptsetup.slice/systemd-cryptsetup@luks.service"#, #"systemd-cryptsetup@luks.service"#),
            ("0::/init.scope\n", "init.scope"),
            ("0::/system.slice/docker-0123abcd.scope\n", "docker-0123abcd.scope"),
            (
                "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice/cri-containerd-ab.scope\n",
                "cri-containerd-ab.scope"
            ),
            ("0::/tokend-test-x.slice/demo.service\n", "demo.service"),
            // A login session is a scope of the system manager.
            ("0::/user.slice/user-1000.slice/session-3.scope\n", "session-3.scope"),
            // A user's own manager: everything in it is in user@UID.service, whatever the user named it.
            ("0::/user.slice/user-1000.slice/user@1000.service/app.slice/backup.service\n", "user@1000.service"),
            ("0::/user.slice/user-1000.slice/user@1000.service/app.slice/run-u12.service\n", "user@1000.service"),
            ("0::/user.slice/user-1000.slice/user@1000.service/session.slice/backup.service\n", "user@1000.service"),
            ("0::/user.slice/user-1000.slice/user@1000.service/app.slice/app-x-1234.scope\n", "user@1000.service"),
            ("0::/user.slice/user-1000.slice/user@1000.service/init.scope\n", "user@1000.service"),
            ("0::/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-0abc.scope/container\n", "user@1000.service"),
            ("0::/user.slice/user-1000.slice/user@1000.service/app.slice\n", "user@1000.service"),
            // Sub-cgroups of a Delegate=yes unit, whatever they are named, are that unit's.
            ("0::/system.slice/other.service/backup.service\n", "other.service"),
            ("0::/system.slice/other.service/evil.slice/backup.service\n", "other.service"),
            ("0::/tokend-test-x.slice/demo.service/sub\n", "demo.service"),
            ("0::/machine.slice/systemd-nspawn@c1.service/payload/system.slice/backup.service\n", "systemd-nspawn@c1.service"),
            ("0::/machine.slice/machine-c1.scope/payload/system.slice/backup.service\n", "machine-c1.scope"),
            // systemd prefixes '_' to names that could clash with the kernel's own files.
            ("0::/system.slice/_cpu.service\n", "cpu.service"),
            ("0::/system.slice/__x.service\n", "_x.service"),
            ("0::/_io.slice/backup.service\n", "backup.service"),
            // In no unit, or under a cgroup systemd did not make.
            ("0::/\n", nil),
            ("0::/system.slice\n", nil),
            ("0::/user.slice/user-1000.slice\n", nil),
            ("0::/foo/backup.service\n", nil),
            ("0::/system.slice/foo.socket/backup.service\n", nil),
            ("0::/bad name.slice/backup.service\n", nil),
            ("0::/.slice/backup.service\n", nil),
            ("0::/a.slice/bad name.service\n", nil),
            ("0::/a.slice/.service\n", nil),
            // Hybrid and legacy hierarchies: a v2 path other than "/" decides; else name=systemd's.
            ("9:name=systemd:/system.slice/legacy.service\n0::/system.slice/new.service\n", "new.service"),
            ("9:name=systemd:/system.slice/legacy.service\n4:memory:/x.service\n0::/\n", "legacy.service"),
            ("12:name=systemd:/system.slice/cron.service\n3:cpu:/\n", "cron.service"),
            ("1:name=systemd:/user.slice/user-1000.slice/user@1000.service/app.slice/backup.service\n0::/\n", "user@1000.service"),
            ("1:name=systemd:/system.slice/backup.service\n0::/user.slice\n", nil),
            ("4:memory:/x.service\n", nil),
            // Malformed: nothing, no path, relative, outside tokend's cgroup namespace, twice.
            ("", nil),
            ("0::\n", nil),
            ("0::system.slice/backup.service\n", nil),
            ("0::/../../system.slice/backup.service\n", nil),
            ("0::/system.slice/../backup.service\n", nil),
            ("0::/system.slice/./backup.service\n", nil),
            ("0::/system.slice/backup.service (deleted)\n", nil),
            ("0::/system.slice/a.service\n0::/system.slice/b.service\n", nil),
            ("garbage\n0::/system.slice/backup.service\n", "backup.service"),
        ] as [(String, String?)])
    func unitFromCgroup(text: String, unit: String?) {
        #expect(ProgramFacts.unit(fromCgroup: text) == unit)
    }

    /// The attack of a user with a lingering manager: `systemd-run --user --unit=backup.service`
    /// puts its own program in `…/user@1000.service/app.slice/backup.service`, and a
    /// `Delegate=yes` unit names a sub-cgroup of its own `backup.service`.
    @Test(arguments: [
        "0::/user.slice/user-1000.slice/user@1000.service/app.slice/backup.service\n",
        "0::/system.slice/other.service/backup.service\n",
    ])
    func aUnitNamedByAUserOrADelegatedUnitIsNotTheReader(cgroup: String) throws {
        let facts = ProgramFacts(unit: ProgramFacts.unit(fromCgroup: cgroup), executable: "/usr/bin/backup")
        let caller = CallerIdentity(uid: 1000, gid: 1000, pid: 42)
        for text in ["unit:backup.service", "uid:1000+unit:backup.service"] {
            let readers = ResolvedReaders([try Reader(parsing: text)], userID: { _ in nil }, groupID: { _ in nil })
            let decision = AccessPolicy().readDecision(caller, readers: readers) { _ in .success(facts) }
            #expect(decision != .granted, "\(text) in \(cgroup)")
        }
    }
}

"""Program readers against real units: scenario f of the real-host layer.

A credential read by `unit:backup.service` is served to a process the SYSTEM manager put in
backup.service, and to nothing else that carries the name: not to another system unit, not to a
user's own user-manager unit of that name, not to a process in a sub-cgroup of that name below a
`Delegate=yes` unit.
"""

from __future__ import annotations

from harness import scenario

DELEGATE_SCRIPT = """set -eu
own=$(sed -n 's|^0::||p' /proc/self/cgroup)
mkdir "/sys/fs/cgroup$own/backup.service"
echo 0 > "/sys/fs/cgroup$own/backup.service/cgroup.procs"   # 0: this process
sed -n 's|^0::|cgroup: |p' /proc/self/cgroup >&2
exec tokenctl --timeout 20 token rh-f
"""


@scenario("f-unit-readers", "unit:backup.service matches only the system manager's backup.service")
def unit_readers(host, checks):
    m = host.machine
    host.ensure_user("backup", system=True)
    token = host.add_credential("rh-f", ["unit:backup.service"])
    try:
        # Lingering: alice's user manager runs without a login session.
        m.run(["loginctl", "enable-linger", "alice"])
        m.wait_for("alice's user manager", lambda: m.run(
            ["systemctl", "is-active", "user@1000.service"], check=False).out.strip() == "active", timeout=60)

        def in_unit(unit: str, *properties: str, user_manager: str | None = None):
            argv = ["systemd-run", "--quiet", "--wait", "--pipe", "--collect", f"--unit={unit}"]
            if user_manager:
                argv += ["--user", f"--machine={user_manager}@"]
            for prop in properties:
                argv += ["-p", prop]
            return m.run([*argv, "tokenctl", "--timeout", "20", "token", "rh-f"], check=False, timeout=90)

        system = in_unit("backup.service", "User=backup")
        checks.expect(system.status == 0 and system.out.strip() == token,
                      "a system unit backup.service (User=backup) reads it", system)

        other = in_unit("other.service", "User=backup")
        checks.expect(other.status != 0 and token not in other.out, "a system unit other.service does not", other)

        user_unit = in_unit("backup.service", user_manager="alice")
        checks.expect(user_unit.status != 0 and token not in user_unit.out,
                      "alice's user-manager unit backup.service does not "
                      "(/user.slice/user-1000.slice/user@1000.service/app.slice/backup.service)", user_unit)

        delegated = m.run(
            ["systemd-run", "--quiet", "--wait", "--pipe", "--collect", "--unit=delegating.service",
             "-p", "User=alice", "-p", "Delegate=yes", "bash", "-c", DELEGATE_SCRIPT],
            check=False, timeout=90,
        )
        checks.expect("delegating.service/backup.service" in delegated.err,
                      "the process ran in the sub-cgroup backup.service of a Delegate=yes unit", delegated)
        checks.expect(delegated.status != 0 and token not in delegated.out,
                      "a process in a sub-cgroup named backup.service below a Delegate=yes unit does not", delegated)
    finally:
        m.run(["loginctl", "disable-linger", "alice"], check=False)
        host.tokenctl("remove", "rh-f", check=False)

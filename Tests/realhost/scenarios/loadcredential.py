"""`LoadCredential=` from tokend against the real service manager (systemd 252).

tokend-credential.socket is turned on as docs/operations.md says; then:
- the timer job of docs/operations.md, its units as written, gets the credential's current token
  in $CREDENTIALS_DIRECTORY, and fails to start (rather than run without one) when tokend refuses;
- a system unit with `LoadCredential=svc:/run/tokend/credential` reads the current token; a unit
  the reader does not name, a user's user-manager unit of the same name, and processes that bind
  systemd's abstract name themselves (root outside the unit, the unit's own user, another user)
  get nothing, each refusal in the journal with its reason.
"""

from __future__ import annotations

import hashlib
import secrets
import shlex

import docs
from harness import scenario
from host import said

SOCKET = "/run/tokend/credential"
OPERATIONS = "docs/operations.md"

# The operator's job in the documented unit: it reports what it was given, never the token.
BACKUP_JOB = """#!/bin/sh
# realhost's stand-in for the backup job of docs/operations.md (--token-file FILE).
set -eu
file="$2"
echo "token-sha256 $(sha256sum < "$file" | cut -d' ' -f1)"
echo "file $(stat -c '%a %u' "$file") uid $(id -u)"
"""

# What systemd's helper does (connect from a socket bound to an abstract name, shut the write
# side, read to the end), by anyone: argv[0] the socket, argv[1] the name without its leading
# NUL ("" leaves the socket unbound). Perl, since Debian's minbase has perl-base and no Python.
CONNECT = r"""
use Socket;
my ($path, $name) = @ARGV;
socket(my $s, PF_UNIX, SOCK_STREAM, 0) or die "socket: $!\n";
if (length $name) { bind($s, pack_sockaddr_un("\0" . $name)) or die "bind: $!\n"; }
connect($s, pack_sockaddr_un($path)) or do { print STDERR "connect: $!\n"; exit 3; };
shutdown($s, 1);
my $data = "";
while (sysread($s, my $chunk, 65536)) { $data .= $chunk; }
print $data;
"""


def systemd_name(unit: str, credential_id: str) -> str:
    """A name of the form systemd 252 binds: `<random 64-bit hex>/unit/<unit>/<ID>`."""
    return f"{secrets.randbits(64):x}/unit/{unit}/{credential_id}"


def job_report(host, marker_us: int) -> list[str] | None:
    """The lines BACKUP_JOB wrote since `marker_us`, once it wrote its last one."""
    lines = [str(entry.get("MESSAGE", "")) for entry in host.journal_since(marker_us, "_SYSTEMD_UNIT=backup.service")]
    lines = [line for line in lines if line.startswith(("token-sha256", "file"))]
    return lines if any(line.startswith("file") for line in lines) else None


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def enable(host) -> None:
    """Turns the socket on as docs/operations.md says (tokend is stopped and started)."""
    host.machine.sh(docs.snippet(OPERATIONS, "loadcredential-enable"), timeout=120)
    host.wait_active()


def disable(host) -> None:
    """Back to the installed state: the socket off, tokend running without it."""
    host.systemctl("disable", "--now", "tokend-credential.socket", check=False)
    host.systemctl("restart", "tokend.service", check=False)
    host.wait_active()


def records(host, marker_us: int) -> list[dict]:
    """tokend's LoadCredential records since `marker_us`."""
    return said(host.journal_since(marker_us, "_SYSTEMD_UNIT=tokend.service"), "LoadCredential:")


def recorded(host, checks, marker_us: int, what: str, **fields: str) -> None:
    """Checks that a record with `fields` (journal field names) was logged since `marker_us`."""
    def matching():
        return [entry for entry in records(host, marker_us) if all(entry.get(key) == value for key, value in fields.items())]
    try:
        host.machine.wait_for(what, matching, timeout=30)
        checks.expect(True, what)
    except AssertionError:
        seen = [{key: entry.get(key) for key in ("TOKEND_UNIT", "CREDENTIAL_ID", "RESULT", "REASON", "UID", "WHY")}
                for entry in records(host, marker_us)]
        checks.expect(False, what, seen)


@scenario("loadcredential-timer-job", "docs/operations.md's timer job gets its token by LoadCredential=, or fails to start")
def timer_job(host, checks):
    m = host.machine
    host.ensure_running()
    installed = [host.systemctl(verb, "tokend-credential.socket", check=False).out.strip() for verb in ("is-enabled", "is-active")]
    checks.expect(installed == ["disabled", "inactive"], "as installed, tokend-credential.socket is off (disabled, inactive)",
                  installed)
    enable(host)
    units = ("/etc/systemd/system/backup.service", "/etc/systemd/system/backup.timer")
    try:
        shown = m.run(["stat", "-c", "%a %U", SOCKET], check=False)
        checks.expect(shown.out.strip() == "600 root", f"{SOCKET} is root's, mode 0600", shown)
        token = host.add_credential("backup", ["unit:backup.service"])
        m.write("/usr/local/bin/backup", BACKUP_JOB, mode="0755")
        m.write(units[0], docs.snippet(OPERATIONS, "loadcredential-backup-service"))
        m.write(units[1], docs.snippet(OPERATIONS, "loadcredential-backup-timer"))
        host.systemctl("daemon-reload")
        enabled = host.systemctl("enable", "--now", "backup.timer", check=False)
        checks.expect(enabled.status == 0, "systemctl enable --now backup.timer", enabled)
        timer = m.show("backup.timer", "ActiveState", "NextElapseUSecRealtime")
        checks.expect(timer["ActiveState"] == "active" and timer["NextElapseUSecRealtime"], "the timer waits for its next run", timer)

        # The run the timer starts, started now, with tokend not running (as after a boot): the
        # service manager's connection starts it through tokend-credential.socket.
        host.systemctl("stop", "tokend.service")
        marker = host.now_us()
        run = host.systemctl("start", "backup.service", check=False, timeout=120)
        checks.expect(run.status == 0, "backup.service runs to its end", run)
        checks.expect(host.service("ActiveState")["ActiveState"] == "active", "its start started tokend (socket activation)",
                      host.service("ActiveState", "SubState"))
        lines = m.wait_for("the job's report in its journal", lambda: job_report(host, marker), timeout=30)
        checks.expect(f"token-sha256 {sha256(token)}" in lines, "the job read the credential's current token", lines)
        report = next((line.split() for line in lines if line.startswith("file")), [])
        checks.expect(len(report) == 5 and report[1] == "400" and report[2] == report[4],
                      "$CREDENTIALS_DIRECTORY/backup: mode 0400, owned by the job's own user", lines)
        recorded(host, checks, marker, "tokend logged the delivery (unit, ID, credential, expiry)",
                 TOKEND_UNIT="backup.service", CREDENTIAL_ID="backup", USER_IDENTIFIER="backup", RESULT="delivered",
                 CALLER_UNIT="backup.service", UID="0")
        logged = host.journal_since(marker, "_SYSTEMD_UNIT=tokend.service")
        checks.expect(not any(token in str(entry) for entry in logged), "no token in tokend's journal")

        # Refused (no such credential): nothing written, and the unit fails instead of running.
        host.tokenctl("remove", "backup")
        marker = host.now_us()
        refused = host.systemctl("start", "backup.service", check=False, timeout=120)
        shown = m.show("backup.service", "Result", "ExecMainStatus")
        checks.expect(refused.status != 0 and shown["Result"] == "exit-code",
                      "refused: backup.service fails at ExecStartPre=test -s (systemd wrote an empty file)", (refused, shown))
        ran = [entry for entry in host.journal_since(marker, "_SYSTEMD_UNIT=backup.service")
               if str(entry.get("MESSAGE", "")).startswith("token-sha256")]
        checks.expect(not ran, "the job itself did not run", ran)
        recorded(host, checks, marker, "tokend logged the refusal (no_such_credential)",
                 TOKEND_UNIT="backup.service", CREDENTIAL_ID="backup", RESULT="refused", REASON="no_such_credential")

        # The journal queries of docs/operations.md, as written.
        queried = m.sh(docs.snippet(OPERATIONS, "loadcredential-journal"), check=False)
        checks.expect(queried.status == 0 and "LoadCredential: token delivered" in queried.out
                      and "LoadCredential: refused" in queried.out and "no_such_credential" in queried.out,
                      "docs/operations.md's journalctl queries show the delivery and the refusal", queried)

        # Without tokend's socket systemd fails the start itself.
        host.systemctl("stop", "tokend-credential.socket")
        host.systemctl("reset-failed", "backup.service", check=False)
        marker = host.now_us()
        missing = host.systemctl("start", "backup.service", check=False, timeout=120)
        said_by_systemd = [str(entry.get("MESSAGE", "")) for entry in host.journal_since(marker, "_PID=1")]
        checks.expect(missing.status != 0 and any("243/CREDENTIALS" in line for line in said_by_systemd),
                      "with the socket stopped, the start fails with status=243/CREDENTIALS", (missing, said_by_systemd[-5:]))
    finally:
        host.systemctl("disable", "--now", "backup.timer", check=False)
        m.run(["rm", "-f", *units, "/usr/local/bin/backup"], check=False)
        host.systemctl("daemon-reload", check=False)
        host.systemctl("reset-failed", "backup.service", check=False)
        host.tokenctl("remove", "backup", check=False)
        disable(host)


@scenario("loadcredential-who", "LoadCredential=svc: only the system manager's own unit named by a unit: reader gets the token")
def who_gets_it(host, checks):
    m = host.machine
    host.ensure_running()
    host.ensure_user("backup", system=True)
    enable(host)
    backup_uid = m.run(["id", "-u", "backup"]).out.strip()
    started = host.now_us()
    token = host.add_credential("svc", ["unit:backup.service"])
    read_it = 'cat "$CREDENTIALS_DIRECTORY/svc"; echo; stat -c "%a %U" "$CREDENTIALS_DIRECTORY/svc"'

    def unit(name: str, *properties: str, user_manager: str | None = None):
        argv = ["systemd-run", "--quiet", "--wait", "--pipe", "--collect", f"--unit={name}",
                "-p", f"LoadCredential=svc:{SOCKET}"]
        if user_manager:
            argv[1:1] = ["--user", f"--machine={user_manager}@"]
        for prop in properties:
            argv += ["-p", prop]
        return m.run([*argv, "sh", "-c", read_it], check=False, timeout=120)

    def connect(name: str, user: str | None = None, *, in_unit: str | None = None, properties: tuple[str, ...] = ()):
        """`name` bound and the socket connected by a process of `user`, in the transient unit `in_unit`."""
        argv = ["perl", "-e", CONNECT, SOCKET, name]
        if in_unit:
            argv = ["systemd-run", "--quiet", "--wait", "--pipe", "--collect", f"--unit={in_unit}",
                    *[arg for prop in properties for arg in ("-p", prop)], *argv]
        return m.run(argv, user=user, check=False, timeout=60)

    try:
        marker = host.now_us()
        system = unit("backup.service", "User=backup")
        checks.expect(system.status == 0 and system.out.split("\n")[0] == token and system.out.split("\n")[1] == "400 backup",
                      "a system unit backup.service (User=backup) reads svc from $CREDENTIALS_DIRECTORY, mode 0400, its user's",
                      system)
        recorded(host, checks, marker, "delivered to backup.service", TOKEND_UNIT="backup.service", CREDENTIAL_ID="svc",
                 RESULT="delivered")

        marker = host.now_us()
        other = unit("other.service", "User=backup")
        checks.expect(token not in other.out and other.out.split("\n")[0] == "", "a system unit other.service gets nothing", other)
        recorded(host, checks, marker, "refused to other.service: not_a_reader", TOKEND_UNIT="other.service",
                 CREDENTIAL_ID="svc", RESULT="refused", REASON="not_a_reader")

        # A user's own manager: any process of alice can name a unit there as it likes.
        m.run(["loginctl", "enable-linger", "alice"])
        m.wait_for("alice's user manager", lambda: m.run(
            ["systemctl", "is-active", "user@1000.service"], check=False).out.strip() == "active", timeout=60)
        user_unit = unit("backup.service", user_manager="alice")
        checks.expect(user_unit.status == 243 and token not in user_unit.out,
                      "alice's user-manager unit backup.service fails to start, 243/CREDENTIALS (the socket is root's only)",
                      user_unit)
        m.run(["chmod", "0666", SOCKET])
        try:
            marker = host.now_us()
            user_unit = unit("backup.service", user_manager="alice")
            checks.expect(token not in user_unit.out and user_unit.out.split("\n")[0] == "",
                          "with the socket's mode opened, it starts and gets nothing", user_unit)
            recorded(host, checks, marker, "refused to alice's manager: not_system_manager (uid 1000)",
                     TOKEND_UNIT="backup.service", CREDENTIAL_ID="svc", RESULT="refused", REASON="not_system_manager",
                     UID="1000")

            # Processes that bind the name themselves, with the socket still open to all.
            forged = systemd_name("backup.service", "svc")
            for name, reason in (("x/unit/backup.service/svc", "malformed_name"), (forged, None)):
                marker = host.now_us()
                as_root = connect(name)
                checks.expect(as_root.out == "", f"root outside any unit, bound to \\0{name}: nothing", as_root)
                as_root_unit = connect(name, in_unit="impostor.service")
                checks.expect(as_root_unit.out == "", f"root in impostor.service, bound to \\0{name}: nothing", as_root_unit)
                as_unit_user = connect(name, in_unit="backup.service", properties=("User=backup",))
                checks.expect(as_unit_user.out == "", f"backup.service's own process (User=backup), bound to \\0{name}: nothing",
                              as_unit_user)
                as_alice = connect(name, user="alice")
                checks.expect(as_alice.out == "", f"alice, bound to \\0{name}: nothing", as_alice)
                if reason:
                    recorded(host, checks, marker, f"refused as {reason}", RESULT="refused", REASON=reason)
                else:
                    recorded(host, checks, marker, "root outside the unit refused: other_unit", TOKEND_UNIT="backup.service",
                             RESULT="refused", REASON="other_unit", UID="0")
                    recorded(host, checks, marker, "root in impostor.service refused: other_unit", RESULT="refused",
                             REASON="other_unit", CALLER_UNIT="impostor.service")
                    for uid in (backup_uid, "1000"):
                        recorded(host, checks, marker, f"uid {uid} refused: not_system_manager", TOKEND_UNIT="backup.service",
                                 RESULT="refused", REASON="not_system_manager", UID=uid)
        finally:
            m.run(["chmod", "0600", SOCKET], check=False)
        marker = host.now_us()
        as_alice = connect(forged, user="alice")
        checks.expect(as_alice.status == 3 and "Permission denied" in as_alice.err,
                      "as installed, alice cannot connect at all", as_alice)
        delivered = [entry for entry in records(host, started) if entry.get("RESULT") == "delivered"]
        checks.expect(len(delivered) == 1, "one delivery in all: to the system unit backup.service",
                      [shlex.join([str(entry.get("TOKEND_UNIT")), str(entry.get("UID"))]) for entry in delivered])
        logged = host.journal_since(started, "_SYSTEMD_UNIT=tokend.service")
        checks.expect(not any(token in str(entry) for entry in logged), "no token in tokend's journal")
    finally:
        m.run(["loginctl", "disable-linger", "alice"], check=False)
        host.tokenctl("remove", "svc", check=False)
        disable(host)

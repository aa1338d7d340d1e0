"""A booted Debian 12 host: systemd as PID 1 of a systemd-nspawn container.

The root is an overlay of the cached layers (`roots`) with an upper directory of this run's own,
mounted under a work directory; nspawn runs from a cgroup of its own (`cgroups.Scope`) with a
private network (only loopback: the container's services stay off the host's), and commands run
inside with `nsenter --all` into its PID 1's namespaces, from a second cgroup of their own.
`stop()` powers the machine off (bounded), kills whatever is left in both cgroups, unmounts and
removes everything; it is safe to call at any point, also twice.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import cgroups
import leftovers

WORK_ROOT = Path(os.environ.get("TOKEND_REALHOST_WORK", "/var/tmp"))
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class CommandFailed(AssertionError):
    pass


@dataclass
class Result:
    argv: list[str]
    status: int
    out: str
    err: str

    def __str__(self) -> str:
        text = f"$ {shlex.join(self.argv)}  → status {self.status}"
        if self.out.strip():
            text += "\n  stdout: " + self.out.strip().replace("\n", "\n          ")
        if self.err.strip():
            text += "\n  stderr: " + self.err.strip().replace("\n", "\n          ")
        return text


class Machine:
    """One booted container. `binds` are host paths bound read-only at the same place inside."""

    def __init__(self, flavour: str, stack: Sequence[Path], binds: Sequence[str] = (), log: Callable[[str], None] = print):
        self.flavour = flavour
        self.stack = list(stack)
        self.binds = list(binds)
        self.log = log
        self.name = leftovers.owned_name("tokend-rh")
        self.work = WORK_ROOT / self.name
        self.root = self.work / "root"
        self.leader: int | None = None
        self._nspawn: subprocess.Popen | None = None
        self._scope: cgroups.Scope | None = None
        self._exec_scope: cgroups.Scope | None = None
        self._mounted = False
        self._background: list[subprocess.Popen] = []

    # MARK: lifecycle

    def prepare(self) -> None:
        """Mounts this run's copy of the root: writable, and thrown away by `stop()`."""
        for sub in ("upper", "overlay-work", "root"):
            (self.work / sub).mkdir(parents=True)
        lower = ":".join(str(tree) for tree in self.stack)
        options = f"lowerdir={lower},upperdir={self.work / 'upper'},workdir={self.work / 'overlay-work'}"
        subprocess.run(["mount", "-t", "overlay", "overlay", "-o", options, str(self.root)], check=True, timeout=30)
        self._mounted = True

    def boot(self, timeout: float = 90) -> float:
        """Boots systemd; returns the seconds until `systemctl is-system-running` answered."""
        started = time.monotonic()
        self._scope = cgroups.Scope(leftovers.owned_name("tokend-realhost-machine"))
        self._exec_scope = cgroups.Scope(leftovers.owned_name("tokend-realhost-exec"))
        command = [
            "systemd-nspawn", "--quiet", "--boot", "--register=no", "--keep-unit", "--private-network",
            f"--machine={self.name}", "--console=pipe", f"--directory={self.root}",
        ] + [f"--bind-ro={path}" for path in self.binds]
        console = open(self.work / "console.log", "w")
        env = dict(os.environ)
        # systemd 252 inside sees the unified cgroup hierarchy, as on a Debian 12 host.
        env["SYSTEMD_NSPAWN_UNIFIED_HIERARCHY"] = "1"
        self._nspawn = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=console, stderr=subprocess.STDOUT,
            preexec_fn=self._scope.enter, env=env, start_new_session=True,
        )
        console.close()
        deadline = started + timeout
        while self.leader is None:
            if self._nspawn.poll() is not None:
                raise RuntimeError(f"systemd-nspawn exited with {self._nspawn.returncode}:\n{self.console_tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"no container PID 1 within {timeout} s:\n{self.console_tail()}")
            self.leader = _container_init(self._nspawn.pid)
            if self.leader is None:
                time.sleep(0.05)
        # Until systemd's private bus socket exists, systemctl cannot connect at all.
        while True:
            remaining = deadline - time.monotonic()
            state = self.run(["systemctl", "is-system-running", "--wait"], timeout=max(1, remaining), check=False)
            if state.out.strip() in ("running", "degraded"):
                break
            if remaining <= 0 or self._nspawn.poll() is not None:
                raise RuntimeError(f"the container's systemd did not come up: {state}\n{self.console_tail()}")
            time.sleep(0.1)
        if state.out.strip() == "degraded":
            failed = self.run(["systemctl", "--failed", "--no-legend", "--plain"], check=False)
            self.log(f"machine {self.name}: degraded at boot: {failed.out.strip()}")
        return time.monotonic() - started

    def stop(self) -> None:
        """Powers off (30 s at most), then kills, unmounts and removes whatever is left."""
        errors: list[str] = []
        for process in self._background:
            _kill_process(process)
        self._background.clear()
        if self._nspawn is not None and self._nspawn.poll() is None:
            # SIGTERM to nspawn --boot asks the container's systemd for a clean poweroff.
            self._nspawn.send_signal(signal.SIGTERM)
            try:
                self._nspawn.wait(timeout=30)
            except subprocess.TimeoutExpired:
                errors.append("the container did not power off within 30 s; killed")
                self._nspawn.kill()
                self._nspawn.wait()
        for scope in (self._exec_scope, self._scope):
            if scope is None:
                continue
            try:
                scope.kill()
                scope.remove()
            except Exception as error:  # keep cleaning up the rest
                errors.append(str(error))
        self._exec_scope = self._scope = None
        self.leader = None
        if self._mounted:
            # Mounts nspawn left in the host's namespace below the root (none expected).
            for mount in sorted(leftovers.mounts_below(self.root), key=len, reverse=True):
                subprocess.run(["umount", "--lazy", mount], timeout=30)
            subprocess.run(["umount", str(self.root)], check=False, timeout=60)
            self._mounted = False
        if self.work.exists():
            if leftovers.mounts_below(self.work):
                errors.append(f"{self.work} still has mounts; left in place")
            else:
                subprocess.run(["rm", "-rf", "--one-file-system", str(self.work)], timeout=120)
        if errors:
            raise RuntimeError("; ".join(errors))

    def console_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join((self.work / "console.log").read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    # MARK: running commands

    def command(self, argv: Sequence[str], user: str | None = None, env: dict[str, str] | None = None) -> list[str]:
        """The host command line that runs `argv` inside, as root or as `user` (setpriv, no PAM)."""
        assert self.leader is not None, "the machine is not booted"
        environment = {"PATH": PATH, "LANG": "C.UTF-8", "HOME": "/root", "SYSTEMD_PAGER": "", "SYSTEMD_COLORS": "0"}
        prefix: list[str] = []
        if user is not None and user != "root":
            home = self.run(["getent", "passwd", user]).out.split(":")[5]
            environment.update(HOME=home, USER=user, LOGNAME=user)
            prefix = ["setpriv", f"--reuid={user}", f"--regid={user}", "--init-groups", "--"]
        environment.update(env or {})
        return (
            ["nsenter", f"--target={self.leader}", "--all", "--", "env", "-i"]
            + [f"{key}={value}" for key, value in environment.items()]
            + prefix + list(argv)
        )

    def run(
        self, argv: Sequence[str], user: str | None = None, input: str | None = None, timeout: float = 60,
        check: bool = True, env: dict[str, str] | None = None,
    ) -> Result:
        """Runs `argv` inside and waits (bounded by `timeout`); `check` raises on a non-zero status."""
        full = self.command(argv, user, env)
        # A session of its own: on a timeout the whole command (nsenter's child and what it
        # started inside) is killed by its process group, so no pipe stays open behind it.
        process = subprocess.Popen(
            full, stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, preexec_fn=self._exec_scope.enter if self._exec_scope else None,
            start_new_session=True,
        )
        try:
            out, err = process.communicate(input=input, timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(process)
            try:
                out, err = process.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                out, err = "", "(its output could not be read)"
            raise CommandFailed(f"timed out after {timeout} s: {shlex.join(argv)}\n  stdout: {out}\n  stderr: {err}") from None
        except BaseException:
            _kill_group(process)
            raise
        result = Result(list(argv), process.returncode, out, err)
        if check and result.status != 0:
            raise CommandFailed(str(result))
        return result

    def sh(self, script: str, user: str | None = None, **kwargs) -> Result:
        """Runs a shell script (bash -e) inside."""
        return self.run(["bash", "-euo", "pipefail", "-c", script], user=user, **kwargs)

    def spawn(self, argv: Sequence[str], output: Path, user: str | None = None) -> subprocess.Popen:
        """Starts `argv` inside without waiting; its output goes to `output` (a host file).
        Stopped by `stop()` at the latest."""
        with open(output, "w") as sink:
            process = subprocess.Popen(
                self.command(argv, user), stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT,
                preexec_fn=self._exec_scope.enter if self._exec_scope else None, start_new_session=True,
            )
        self._background.append(process)
        return process

    def end(self, process: subprocess.Popen) -> None:
        """Ends a process of `spawn` and what it started inside (`Popen.kill` would end only
        nsenter and leave the command running inside)."""
        _kill_process(process)
        if process in self._background:
            self._background.remove(process)

    def write(self, path: str, text: str, mode: str = "0644", owner: str = "root:root") -> None:
        """Writes a file inside (its folder must exist)."""
        self.run(
            ["sh", "-c", 'cat > "$1" && chmod "$2" "$1" && chown "$3" "$1"', "sh", path, mode, owner], input=text,
        )

    # MARK: systemd

    def show(self, unit: str, *properties: str, user: str | None = None) -> dict[str, str]:
        argv = ["systemctl"]
        if user:
            argv += ["--user", f"--machine={user}@"]
        argv += ["show", unit] + [f"--property={p}" for p in properties]
        out = self.run(argv).out
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)

    def journal(self, *matches: str, boot_only: bool = True) -> list[dict]:
        """This boot's journal entries as JSON objects, filtered here (not by `--after-cursor`
        with a match, which journalctl 252 can get wrong)."""
        argv = ["journalctl", "--output=json", "--no-pager", "--all"]
        if boot_only:
            argv.append("--boot")
        argv += list(matches)
        out = self.run(argv, timeout=60, check=False).out
        return [json.loads(line) for line in out.splitlines() if line.startswith("{")]

    def wait_for(self, what: str, predicate: Callable[[], object], timeout: float, interval: float = 0.2):
        """Polls `predicate` until it returns a true value (returned), or fails after `timeout` s."""
        deadline = time.monotonic() + timeout
        last_error: Exception | None = None
        while True:
            try:
                value = predicate()
                if value:
                    return value
            except (CommandFailed, OSError, ValueError) as error:
                last_error = error
            if time.monotonic() > deadline:
                detail = f" (last error: {last_error})" if last_error else ""
                raise AssertionError(f"{what}: not within {timeout} s{detail}")
            time.sleep(interval)


def _container_init(nspawn_pid: int) -> int | None:
    """The host pid of the container's PID 1: a descendant of nspawn that is pid 1 in its namespace."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                ppid = int(stat.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    pending = list(children.get(nspawn_pid, []))
    while pending:
        pid = pending.pop()
        try:
            with open(f"/proc/{pid}/status") as status:
                for line in status:
                    if line.startswith("NSpid:"):
                        ids = line.split()[1:]
                        if len(ids) > 1 and ids[-1] == "1":
                            return pid
        except OSError:
            continue
        pending.extend(children.get(pid, []))
    return None


def _kill_group(process: subprocess.Popen) -> None:
    """SIGKILL to the process group of `process` (started with start_new_session=True): first to
    what runs inside, so that nsenter (the group's leader) reaps its child and exits, then to
    whatever is left. Killed first, nsenter would leave its child to the host's PID 1 (the
    parent's namespace decides who reaps an orphan), and until that init reaps the zombie, the
    container's systemd waits for it at poweroff (10 s)."""
    inside = [pid for pid in _group_members(process.pid) if pid != process.pid]
    for pid in inside:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if inside:
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _group_members(group: int) -> list[int]:
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 2 and fields[2] == str(group) and fields[0] != "Z":
            members.append(int(entry))
    return members


def _kill_process(process: subprocess.Popen) -> None:
    _kill_group(process)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass

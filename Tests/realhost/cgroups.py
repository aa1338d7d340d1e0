"""A cgroup of its own for each container the layer starts.

systemd-nspawn places the container relative to the cgroup it is started from; started from the
root cgroup it takes a fixed place there, and two containers at once (two checkouts testing)
collide. So every nspawn is started from a fresh directory: in the unified hierarchy (cgroup v2,
/sys/fs/cgroup on a pure v2 host, /sys/fs/cgroup/unified on a hybrid one) and, where the host
still has the named systemd v1 hierarchy, there too (nspawn reads its place from that one on
such hosts). `kill()` ends every process in it, `remove()` removes the directories.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

_FS = Path("/sys/fs/cgroup")


def hierarchies() -> list[Path]:
    """The mount points to make a directory in: the unified one and the named systemd one."""
    if (_FS / "cgroup.controllers").exists():
        return [_FS]  # pure cgroup v2
    found = [path for path in (_FS / "unified", _FS / "systemd") if (path / "cgroup.procs").exists()]
    if not found:
        raise RuntimeError("no cgroup v2 or name=systemd hierarchy under /sys/fs/cgroup")
    return found


class Scope:
    """The directory `name` in every hierarchy, made unless `existing`; a context manager that
    removes it."""

    def __init__(self, name: str, existing: bool = False):
        self.name = name
        self.paths = [root / self.name for root in hierarchies()]
        for path in self.paths:
            if not existing:
                path.mkdir()

    def __enter__(self) -> Scope:
        return self

    def __exit__(self, *exc) -> None:
        self.kill()
        self.remove()

    def enter(self) -> None:
        """Moves the calling process here (for `preexec_fn`: runs in the child before exec)."""
        for path in self.paths:
            (path / "cgroup.procs").write_text("0\n")

    def pids(self) -> set[int]:
        found: set[int] = set()
        for path in self.paths:
            for directory, _, _ in os.walk(path):
                try:
                    found.update(int(line) for line in Path(directory, "cgroup.procs").read_text().split())
                except (OSError, ValueError):
                    pass
        return found

    def kill(self, deadline_seconds: float = 15) -> None:
        """SIGKILL to every process here (cgroup.kill where the kernel has it), until none is left."""
        deadline = time.monotonic() + deadline_seconds
        while True:
            pids = self.pids()
            if not pids:
                return
            for path in self.paths:
                try:
                    (path / "cgroup.kill").write_text("1\n")
                except OSError:
                    pass
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"cgroup {self.name}: processes {sorted(pids)} survive SIGKILL")
            time.sleep(0.1)

    def remove(self) -> None:
        """Removes the directories, deepest first (the container's systemd makes its own below)."""
        for path in self.paths:
            if not path.exists():
                continue
            for directory, _, _ in os.walk(path, topdown=False):
                _rmdir(Path(directory))


def _rmdir(path: Path) -> None:
    for _ in range(50):
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.1)  # the last process may still be leaving
    path.rmdir()

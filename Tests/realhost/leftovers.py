"""What a run that was killed outright (SIGKILL, a lost session) left behind, removed by the next.

A run cleans up after itself on failure, SIGINT, SIGTERM and SIGHUP; SIGKILL it cannot catch, and
then its container may still run, its overlay stay mounted and its cgroups stay. So everything a
run makes carries its pid in its name (`owned_name`), and a run starts by removing what belongs
to a pid that is no longer a running realhost (`sweep`): another checkout's run at the same time
is alive and is left alone.
"""

from __future__ import annotations

import os
import re
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path

import cgroups

_OWNED = re.compile(r"^(tokend-rh|tokend-realhost-[a-z]+)-(\d+)-[0-9a-f]+$")


def owned_name(prefix: str) -> str:
    """`prefix-<this run's pid>-<random>`: unique, and tells `sweep` whose it is."""
    return f"{prefix}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


def sweep(work_root: Path, log: Callable[[str], None]) -> None:
    """Kills, unmounts and removes the cgroups and work folders of runs that are gone."""
    for hierarchy in cgroups.hierarchies():
        for path in sorted(hierarchy.glob("tokend-realhost-*")):
            if path.is_dir() and _is_stale(path.name):
                log(f"realhost: removing cgroup {path} of a run that was killed")
                scope = cgroups.Scope(path.name, existing=True)
                scope.kill()
                scope.remove()
    for path in sorted(work_root.glob("tokend-*")):
        if path.is_dir() and _is_stale(path.name):
            log(f"realhost: removing {path} of a run that was killed")
            for mount in sorted(mounts_below(path), key=len, reverse=True):
                subprocess.run(["umount", "--lazy", mount], check=False, timeout=60)
            subprocess.run(["rm", "-rf", "--one-file-system", str(path)], check=False, timeout=120)


def _is_stale(name: str) -> bool:
    match = _OWNED.match(name)
    if not match:
        return False
    pid = int(match.group(2))
    if pid == os.getpid():
        return False
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return True
    return b"realhost.py" not in command


def mounts_below(path: Path) -> list[str]:
    """The mount points below `path` in this mount namespace."""
    prefix = str(path).rstrip("/") + "/"
    with open("/proc/self/mountinfo") as mountinfo:
        points = [line.split()[4].replace("\\040", " ") for line in mountinfo]
    return [point for point in points if point.startswith(prefix)]

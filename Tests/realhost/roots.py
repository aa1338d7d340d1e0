"""The Debian 12 roots the real-host layer boots, built once and cached outside the checkout.

A root is a stack of layers. The bottom layer is a `debootstrap --variant=minbase` of Debian 12
with systemd and what tokend needs at run time; each further layer is the upper directory of an
overlay on the layers below, filled by `apt-get install` in a container of its own. A run boots
an overlay of the layers with an empty upper directory of its own (`machine.Machine`), so the
cache is never written to after it was built.

Each layer's directory name carries a hash of its package list, of the layer below and of this
file: changing a list (or how roots are built) builds a new layer; a layer older than
`MAX_AGE_DAYS` is built again (Debian's point releases). Building takes an exclusive lock, so
two runs at once wait for one build. Layers of other keys unused for a day are removed.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import cgroups
import leftovers

CACHE = Path(os.environ.get("TOKEND_REALHOST_CACHE", "/var/cache/tokend-realhost"))
MIRROR = os.environ.get("TOKEND_REALHOST_MIRROR", "http://deb.debian.org/debian")
SUITE = "bookworm"
MAX_AGE_DAYS = 30

# Minimal Debian 12 plus what the tokend package depends on (systemd, libsqlite3-0; libc6,
# libstdc++6, libgcc-s1 and zlib1g are in minbase) and what user managers need (dbus,
# libpam-systemd, dbus-user-session). Nothing else: scenario c proves that `systemctl reload`
# works with only these, so no tool that a unit could lean on by accident (procps's /bin/kill)
# may be in this layer.
BASE_PACKAGES = ("systemd", "systemd-sysv", "dbus", "libpam-systemd", "dbus-user-session", "libsqlite3-0")


@dataclass(frozen=True)
class Layer:
    """A layer: `packages` installed on `below` (or debootstrapped, for the bottom layer)."""

    name: str
    packages: tuple[str, ...]
    below: Layer | None = None

    def key(self) -> str:
        digest = hashlib.sha256()
        digest.update(Path(__file__).read_bytes())
        digest.update(f"{SUITE} {MIRROR} {self.name} {' '.join(self.packages)}".encode())
        if self.below is not None:
            digest.update(self.below.key().encode())
        return digest.hexdigest()[:16]

    @property
    def directory(self) -> Path:
        return CACHE / f"{self.name}-{self.key()}"

    @property
    def tree(self) -> Path:
        """The layer's files: the root itself, or the overlay upper directory."""
        return self.directory / ("root" if self.below is None else "upper")

    def stack(self) -> list[Path]:
        """The trees of this layer and those below it, top first (overlayfs' lowerdir order)."""
        trees = [self.tree]
        if self.below is not None:
            trees += self.below.stack()
        return trees


BASE = Layer("base", BASE_PACKAGES)
# A notification server for the desktop scenario (g): python3-dbusmock's notification_daemon
# template on a user's session bus. Booted only for the scenarios that ask for it.
DESKTOP = Layer("desktop", ("python3-dbusmock",), below=BASE)
FLAVOURS = {"minimal": BASE, "desktop": DESKTOP}


def ensure(layer: Layer, log) -> list[Path]:
    """Builds `layer` (and the layers below) when missing or outdated; returns its stack."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        _ensure_locked(layer, log)
    return layer.stack()


def _ensure_locked(layer: Layer, log) -> None:
    if layer.below is not None:
        _ensure_locked(layer.below, log)
    done = layer.directory / "built"
    if done.exists() and time.time() - done.stat().st_mtime < MAX_AGE_DAYS * 86400:
        done.with_name("used").touch()
        return
    if layer.directory.exists():
        log(f"roots: rebuilding {layer.directory.name} ({'outdated' if done.exists() else 'incomplete'})")
        shutil.rmtree(layer.directory)
    started = time.monotonic()
    building = layer.directory.with_name(layer.directory.name + ".building")
    shutil.rmtree(building, ignore_errors=True)
    building.mkdir()
    try:
        if layer.below is None:
            _debootstrap(building / "root", layer.packages, log)
        else:
            _install_layer(layer, building, log)
    except BaseException:
        _unmount_quietly(building / "merged")
        shutil.rmtree(building, ignore_errors=True)
        raise
    (building / "built").write_text(" ".join(layer.packages) + "\n")
    (building / "used").touch()
    building.rename(layer.directory)
    log(f"roots: built {layer.directory} in {time.monotonic() - started:.0f} s")
    _remove_stale(layer)


def _debootstrap(root: Path, packages: tuple[str, ...], log) -> None:
    log(f"roots: debootstrap {SUITE} with {', '.join(packages)} (once; cached in {CACHE})")
    command = [
        "debootstrap", "--variant=minbase", f"--include={','.join(packages)}", SUITE, str(root), MIRROR,
    ]
    _run_logged(command, root.parent / "debootstrap.log", timeout=900)
    # The machine id is made at each boot (an empty file: systemd fills it in memory).
    (root / "etc/machine-id").write_text("")
    # Bounded stops: a unit that hangs at shutdown must not hold the run for 90 s.
    dropin = root / "etc/systemd/system.conf.d"
    dropin.mkdir(parents=True, exist_ok=True)
    (dropin / "tokend-realhost.conf").write_text("[Manager]\nDefaultTimeoutStopSec=15s\n")
    subprocess.run(["chroot", str(root), "apt-get", "clean"], check=True, timeout=60)


def _install_layer(layer: Layer, building: Path, log) -> None:
    assert layer.below is not None
    log(f"roots: layer {layer.name}: apt-get install {' '.join(layer.packages)}")
    upper, work, merged = building / "upper", building / "work", building / "merged"
    for directory in (upper, work, merged):
        directory.mkdir()
    lower = ":".join(str(tree) for tree in layer.below.stack())
    subprocess.run(
        ["mount", "-t", "overlay", "overlay", "-o", f"lowerdir={lower},upperdir={upper},workdir={work}", str(merged)],
        check=True, timeout=30,
    )
    try:
        script = (
            "set -e; export DEBIAN_FRONTEND=noninteractive; apt-get update -qq; "
            f"apt-get install -y -qq --no-install-recommends {' '.join(layer.packages)} >/dev/null; apt-get clean; "
            "rm -rf /var/lib/apt/lists/*"
        )
        with cgroups.Scope(leftovers.owned_name("tokend-realhost-layer")) as scope:
            _run_logged(
                ["systemd-nspawn", "--quiet", "--register=no", "--keep-unit", "--resolv-conf=copy-host",
                 "-D", str(merged), "/bin/sh", "-c", script],
                building / "apt.log", timeout=900, scope=scope,
            )
    finally:
        subprocess.run(["umount", str(merged)], check=True, timeout=60)
    shutil.rmtree(work)
    merged.rmdir()


def _run_logged(command: list[str], log_file: Path, timeout: float, scope: cgroups.Scope | None = None) -> None:
    with open(log_file, "w") as output:
        process = subprocess.Popen(
            command, stdout=output, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            preexec_fn=scope.enter if scope else None,
        )
        try:
            status = process.wait(timeout=timeout)
        except BaseException:
            process.kill()
            process.wait()
            raise
    if status != 0:
        tail = log_file.read_text(errors="replace").splitlines()[-20:]
        raise RuntimeError(f"{command[0]} failed (status {status}); {log_file}:\n" + "\n".join(tail))


def _unmount_quietly(path: Path) -> None:
    if os.path.ismount(path):
        subprocess.run(["umount", "--lazy", str(path)], timeout=60)


_LAYER_NAME = re.compile(r"[a-z]+-[0-9a-f]{16}")


def _remove_stale(current: Layer) -> None:
    """Layers of other keys nobody used for a day (a run at once holds its layers' lock)."""
    keep = set()
    layer: Layer | None = current
    while layer is not None:
        keep.add(layer.directory.name)
        layer = layer.below
    for directory in CACHE.iterdir():
        if not _LAYER_NAME.fullmatch(directory.name) or directory.name in keep:
            continue
        used = directory / "used"
        if used.exists() and time.time() - used.stat().st_mtime < 86400:
            continue
        shutil.rmtree(directory, ignore_errors=True)

#!/usr/bin/python3
"""tokend on a real host: Debian 12 with systemd 252 as PID 1, operated as an operator would.

    scripts/realhost [--bin-dir DIR | --debs DIR] [--list] [SCENARIO...]

The layer builds a minimal Debian 12 root once (debootstrap; cached in /var/cache/tokend-realhost,
see roots.py), boots a throwaway overlay of it per run with `systemd-nspawn --boot`
(machine.py), installs tokend the way an operator does (host.py: the development build through
scripts/install and the by-hand steps of docs/operations.md, or the .deb packages with apt-get),
runs the scenarios inside as root and as other local users with systemctl, journalctl,
systemd-run and loginctl, and stops and removes everything it started, also on failure, SIGINT
and SIGTERM; what a run killed outright (SIGKILL) left, the next run removes (leftovers.py).
Python 3 standard library only; runs as root.

Adding a scenario
-----------------
Write a function in a module of scenarios/ (or a new module, imported in scenarios/__init__.py):

    from harness import scenario

    @scenario("my-check", "what it proves, in one line", flavour="minimal", mode="any")
    def my_check(host, checks):
        token = host.add_credential("svc", ["unit:backup.service"])
        result = host.machine.run(["systemd-run", "--wait", "--pipe", "--unit=backup.service",
                                   "tokenctl", "token", "svc"], check=False)
        checks.expect(result.out.strip() == token, "backup.service reads svc", result)

- `host` (host.Host): `machine.run/sh/write/show/journal/wait_for/end` (machine.py) run commands
  inside as root or `user=`; `tokenctl`, `systemctl`, `ensure_running`, `restoring_config`,
  `add_config`, `add_credential`, `ensure_user`, `journal_since`, `background` (host.py). Every
  command and wait has a deadline. Users alice (uid 1000) and bob (1001) exist; the provider
  `realhost` (a closed token endpoint) serves credentials added from a token response.
- `checks` (harness.Checks): `expect` records a check and carries on, `require` stops the
  scenario when it fails, `note` adds a measurement to the report.
- `flavour`: the root to boot, "minimal" (Debian minbase + the package's dependencies) or a layer
  of roots.FLAVOURS ("desktop" adds python3-dbusmock); one machine is booted per flavour and
  its scenarios run on it in the order of scenarios/__init__.py, so a scenario puts back what it
  changes (`with host.restoring_config():`, a `finally`) and starts tokend when it needs it
  running (`host.ensure_running()`).
- `mode`: "dev" (scripts/test, the development build), "deb" (scripts/test-package), or "any".
- An operator example in the docs is run as written by marking its code block
  (`<!-- realhost: NAME -->`, see docs.py) and running `docs.snippet(path, NAME)` inside.
- A scenario that shows a bug is first run against the unfixed build and seen to fail.
- Run it alone with `scripts/realhost my-check` (`--list` shows every scenario); a tool the
  scenario needs inside that the package does not depend on goes into a layer of
  roots.FLAVOURS, never into "minimal" (scenario c proves the package on minbase + Depends:).
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import docs  # noqa: E402
import leftovers  # noqa: E402
import roots  # noqa: E402
import scenarios  # noqa: E402,F401  (registers the scenarios)
from harness import SCENARIOS, Outcome, run_scenario  # noqa: E402
from host import INSTALL_EXAMPLES, Host  # noqa: E402
from machine import WORK_ROOT, Machine  # noqa: E402

REPO = HERE.parents[1]
DOCUMENTS_WITH_EXAMPLES = ["README.md", "docs/operations.md", "docs/clients.md", "docs/notifications.md"]


class Interrupted(BaseException):
    """SIGINT, SIGTERM, SIGHUP or the time limit: not a scenario's failure, the end of the run."""


def main() -> int:
    parser = argparse.ArgumentParser(prog="scripts/realhost", description=__doc__.split("\n\n")[0])
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--bin-dir", type=Path, help="development binaries (default: .build/debug)")
    source.add_argument("--debs", type=Path, help="a folder with tokend_*.deb and tokenctl_*.deb")
    parser.add_argument("--list", action="store_true", help="list the scenarios and exit")
    parser.add_argument("scenario", nargs="*", help="run only these scenarios (names as --list shows)")
    arguments = parser.parse_args()
    mode = "deb" if arguments.debs else "dev"

    chosen = [s for s in SCENARIOS if s.mode in (mode, "any") and (not arguments.scenario or s.name in arguments.scenario)]
    if arguments.list:
        for s in SCENARIOS:
            print(f"{s.name:24} {s.mode:4} {s.flavour:8} {s.title}")
        return 0
    unknown = set(arguments.scenario) - {s.name for s in SCENARIOS}
    if unknown:
        parser.error(f"no scenario named {', '.join(sorted(unknown))} (--list shows them)")
    if os.geteuid() != 0:
        parser.error("run as root (it mounts, boots containers and makes cgroups)")

    limit = int(os.environ.get("TOKEND_REALHOST_LIMIT", "1200"))
    for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGALRM):
        signal.signal(number, _interrupt)
    signal.alarm(limit)

    bin_dir = (arguments.bin_dir or REPO / ".build/debug").resolve() if mode == "dev" else None
    debs = arguments.debs.resolve() if arguments.debs else None
    venv = Path(os.environ["TOKEND_VENV"]) if os.environ.get("TOKEND_VENV") else None
    binds = _runtime_folders(bin_dir) if bin_dir else []
    leftovers.sweep(WORK_ROOT, log)
    work = WORK_ROOT / leftovers.owned_name("tokend-realhost-run")
    work.mkdir(parents=True)

    outcomes: list[Outcome] = []
    timings: list[str] = []
    started = time.monotonic()
    status = 0
    try:
        for flavour in _flavours_in_order(chosen):
            layer = roots.FLAVOURS[flavour]
            at = time.monotonic()
            stack = roots.ensure(layer, log)
            timings.append(f"root {flavour}: {time.monotonic() - at:.1f} s")
            machine = Machine(flavour, stack, binds=binds, log=log)
            host = Host(machine, mode, REPO, work, bin_dir=bin_dir, debs=debs, venv=venv)
            try:
                at = time.monotonic()
                machine.prepare()
                host.stage()
                timings.append(f"stage {flavour}: {time.monotonic() - at:.1f} s")
                boot = machine.boot()
                timings.append(f"boot {flavour}: {boot:.1f} s")
                at = time.monotonic()
                host.install()
                timings.append(f"install {flavour}: {time.monotonic() - at:.1f} s")
                log(f"machine {machine.name} ({flavour}) is up: systemd {_systemd_version(machine)}")
                for each in chosen:
                    if each.flavour == flavour:
                        outcomes.append(run_scenario(each, host, log))
            except Exception as error:  # setting the machine up failed: its scenarios did not run
                log(f"realhost: the {flavour} machine could not be set up: {type(error).__name__}: {error}")
                log(machine.console_tail())
                status = 1
            finally:
                at = time.monotonic()
                try:
                    machine.stop()
                except Exception as error:
                    log(f"realhost: cleaning up {machine.name}: {error}")
                    status = 1
                timings.append(f"stop {flavour}: {time.monotonic() - at:.1f} s")
        if not arguments.scenario:
            other_install = {f"{path}: {name}" for m, (path, name) in INSTALL_EXAMPLES.items() if m != mode}
            for leftover in set(docs.unused_markers(DOCUMENTS_WITH_EXAMPLES)) - other_install:
                log(f"realhost: the example {leftover} is marked but no scenario runs it")
                status = 1
    except Interrupted as interruption:
        log(f"realhost: {interruption}; everything it started was stopped")
        status = 1
    finally:
        signal.alarm(0)
        subprocess.run(["rm", "-rf", "--one-file-system", str(work)], timeout=60)

    failed = [o for o in outcomes if not o.passed]
    log("")
    log(f"realhost: {len(outcomes) - len(failed)} of {len(outcomes)} scenarios passed in {time.monotonic() - started:.0f} s "
        f"({'; '.join(timings)})")
    for outcome in failed:
        log(f"realhost: FAILED {outcome.scenario.name}: {outcome.scenario.title}")
    if len(outcomes) < len(chosen):
        status = 1
    return 1 if failed or status else 0


def log(text: str) -> None:
    print(text, flush=True)


def _interrupt(number, _frame) -> None:
    signal.signal(number, signal.SIG_IGN)  # once: the clean-up must not be interrupted again
    name = "the time limit (TOKEND_REALHOST_LIMIT)" if number == signal.SIGALRM else signal.Signals(number).name
    raise Interrupted(f"stopped by {name}")


def _flavours_in_order(chosen) -> list[str]:
    order: list[str] = []
    for each in chosen:
        if each.flavour not in order:
            order.append(each.flavour)
    return order


def _runtime_folders(bin_dir: Path) -> list[str]:
    """Folders outside the system's library paths that the binaries load libraries from (the
    Swift toolchain's runtime, for development builds): bound read-only into the machine."""
    folders: set[str] = set()
    for program in ("tokend", "tokenctl"):
        out = subprocess.run(["ldd", str(bin_dir / program)], capture_output=True, text=True).stdout
        for match in re.finditer(r"=>\s+(/\S+)", out):
            folder = os.path.dirname(match.group(1))
            if re.match(r"^/(usr/)?lib(64|32)?(/x86_64-linux-gnu|/aarch64-linux-gnu)?$", folder):
                continue
            folder = os.path.realpath(folder)
            # The whole toolchain (its usr folder), as on a development host: the runtime also
            # finds its crash handler, swift-backtrace, in usr/libexec there.
            toolchain = re.match(r"^(.*/usr)/lib/swift/linux$", folder)
            folders.add(toolchain.group(1) if toolchain else folder)
    return sorted(folders)


def _systemd_version(machine: Machine) -> str:
    return machine.run(["systemctl", "--version"]).out.split("\n")[0]


if __name__ == "__main__":
    sys.exit(main())

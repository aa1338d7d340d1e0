"""A booted machine with tokend installed as an operator installs it, and what scenarios do there.

Two installations:
- "dev" (scripts/test): `scripts/install --bin-dir BIN` stages the development binaries, units,
  sysusers.d/tmpfiles.d snippets, man pages and docs into the machine's root with
  PREFIX=/usr/local (as on a host without the package), then the by-hand steps of
  docs/operations.md ("Other distributions") run inside, as written there. The binaries need
  the Swift runtime: the toolchain's runtime folder is bound read-only at its own path.
- "deb" (scripts/test-package): `apt-get install ./tokend_*.deb ./tokenctl_*.deb` inside.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import docs
from machine import Machine, Result

# A provider whose token endpoint is a closed loopback port: credentials added from a token
# response are served from the store without any grant.
TEST_PROVIDER = """
[providers.realhost]
kind = "oauth2"
token_endpoint = "http://127.0.0.1:9/token"
client_id = "tokend-realhost"
client_auth = "none"
"""

CONFIG = "/etc/tokend/tokend.toml"
# The examples each installation runs (the other one's are not run by it).
INSTALL_EXAMPLES = {
    "dev": ("docs/operations.md", "install-by-hand"),
    "deb": ("docs/operations.md", "seal-before-install"),
}


class Host:
    def __init__(self, machine: Machine, mode: str, repo: Path, work: Path, bin_dir: Path | None = None,
                 debs: Path | None = None, venv: Path | None = None):
        self.machine = machine
        self.mode = mode
        self.repo = repo
        self.work = work  # host folder for this run's files (logs of background commands)
        self.bin_dir = bin_dir
        self.debs = debs
        self.venv = venv
        self.prefix = "/usr/local" if mode == "dev" else "/usr"

    # MARK: installation

    def stage(self) -> None:
        """Before boot: puts the build into the machine's root. scripts/install runs once per
        run, into WORK/staged; each machine gets a copy."""
        if self.mode == "dev":
            assert self.bin_dir is not None
            staged = self.work / "staged"
            if not (staged / "done").exists():
                shutil.rmtree(staged, ignore_errors=True)
                env = dict(os.environ, DESTDIR=str(staged / "root"), PREFIX=self.prefix, SYSCONFDIR="/etc")
                subprocess.run(
                    [str(self.repo / "scripts/install"), "--bin-dir", str(self.bin_dir)], cwd=self.repo, env=env,
                    check=True, timeout=900, stdout=subprocess.DEVNULL,
                )
                (staged / "done").touch()
            subprocess.run(["cp", "-a", f"{staged / 'root'}/.", str(self.machine.root)], check=True, timeout=300)
        else:
            assert self.debs is not None
            target = self.machine.root / "var/cache/tokend-debs"
            target.mkdir(parents=True)
            for deb in sorted(self.debs.glob("*.deb")):
                if "dbgsym" not in deb.name:
                    shutil.copy(deb, target)

    def install(self) -> None:
        """After boot: the operator's installation steps."""
        if self.mode == "dev":
            # docs/operations.md, "Other distributions: scripts/install", as written.
            self.machine.sh(docs.snippet(*INSTALL_EXAMPLES["dev"]), timeout=120)
        else:
            # docs/operations.md, "The Debian package": the key sealed before installing, then apt.
            self.machine.sh(docs.snippet(*INSTALL_EXAMPLES["deb"]), timeout=60)
            self.machine.sh(
                "DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "
                "/var/cache/tokend-debs/tokend_*.deb /var/cache/tokend-debs/tokenctl_*.deb",
                timeout=300,
            )
        self.add_config(TEST_PROVIDER)
        # The package started tokend already: it takes the provider now.
        self.systemctl("try-reload-or-restart", "tokend.service")
        # Local users besides root: alice (uid 1000) and bob (uid 1001).
        for user in ("alice", "bob"):
            self.ensure_user(user)

    # MARK: tokend

    def tokenctl(self, *args: str, user: str | None = None, input: str | None = None, check: bool = True,
                 timeout: float = 60) -> Result:
        return self.machine.run(["tokenctl", "--timeout", "20", *args], user=user, input=input, check=check,
                                timeout=timeout)

    def systemctl(self, *args: str, check: bool = True, timeout: float = 90) -> Result:
        return self.machine.run(["systemctl", *args], check=check, timeout=timeout)

    def service(self, *properties: str) -> dict[str, str]:
        return self.machine.show("tokend.service", *properties)

    def main_pid(self) -> int:
        return int(self.service("MainPID")["MainPID"])

    def ensure_running(self) -> int:
        """Starts tokend if it is not running (a call through its socket) and returns its pid."""
        self.tokenctl("status")
        return self.wait_active()

    def wait_active(self, timeout: float = 60) -> int:
        """Waits until tokend.service is active (READY=1 seen) and returns its main pid."""
        def running():
            state = self.service("ActiveState", "SubState", "MainPID")
            if state["ActiveState"] == "active" and state["SubState"] == "running" and state["MainPID"] != "0":
                return int(state["MainPID"])
            return None
        return self.machine.wait_for("tokend.service active and running", running, timeout)

    def add_config(self, text: str) -> None:
        """Appends TOML to the configuration file."""
        current = self.machine.run(["cat", CONFIG]).out
        self.machine.write(CONFIG, current.rstrip("\n") + "\n" + text, mode="0644")

    @contextlib.contextmanager
    def restoring_config(self) -> Iterator[None]:
        """Whatever the block does to the configuration is undone, and tokend reloaded, at its end."""
        original = self.config()
        try:
            yield
        finally:
            self.set_config(original)
            self.systemctl("reload", "tokend.service", check=False)

    def config(self) -> str:
        return self.machine.run(["cat", CONFIG]).out

    def set_config(self, text: str) -> None:
        self.machine.write(CONFIG, text, mode="0644")

    def add_credential(self, name: str, readers: list[str], provider: str = "realhost", user: str | None = None,
                       extra: dict | None = None) -> str:
        """Adds a credential from a token response through `tokenctl add`; returns its access token."""
        token = f"rh-{name}-{secrets.token_hex(12)}"
        response = {"access_token": token, "token_type": "Bearer", "expires_in": 3600,
                    "refresh_token": f"refresh-{secrets.token_hex(12)}"}
        response.update(extra or {})
        args = ["add", name, "--provider", provider]
        for reader in readers:
            args += ["--reader", reader]
        self.tokenctl(*args, user=user, input=json.dumps(response))
        return token

    def now_us(self) -> int:
        """The machine's wall clock in microseconds (a journal marker: entries at or after it)."""
        return int(self.machine.run(["date", "+%s%6N"]).out)

    def journal_since(self, marker_us: int, *matches: str) -> list[dict]:
        return [entry for entry in self.machine.journal(*matches)
                if int(entry.get("__REALTIME_TIMESTAMP", "0")) >= marker_us]

    def ensure_user(self, name: str, system: bool = False) -> None:
        if self.machine.run(["getent", "passwd", name], check=False).status == 0:
            return
        args = ["useradd", "--user-group", "--shell", "/bin/bash"]
        args += ["--system", "--no-create-home"] if system else ["--create-home"]
        self.machine.run([*args, name])

    def background(self, name: str, argv: list[str], user: str | None = None):
        """Starts a long-running command inside; its output goes to WORK/NAME.log. End it with
        `machine.end(process)`, or leave it to the machine's stop."""
        return self.machine.spawn(argv, self.work / f"{name}.log", user=user)

    def log_of(self, name: str) -> str:
        return (self.work / f"{name}.log").read_text(errors="replace")


def said(entries: list[dict], text: str) -> list[dict]:
    """The entries whose MESSAGE begins with `text` (tokend's messages end with their metadata,
    `key=value …`)."""
    return [entry for entry, message in zip(entries, messages(entries), strict=False) if message.startswith(text)]


def messages(entries: list[dict]) -> list[str]:
    """The MESSAGE fields (journalctl --output=json gives a byte array for binary ones)."""
    found = []
    for entry in entries:
        message = entry.get("MESSAGE", "")
        if isinstance(message, list):
            message = bytes(message).decode(errors="replace")
        found.append(message)
    return found


def elapsed(since: float) -> float:
    return time.monotonic() - since

"""The upgrade path with the .deb: scenario h of the real-host layer (scripts/test-package).

The newer build is the same package repacked with a higher version (dpkg-deb -R, Version +1):
dpkg and the maintainer scripts take the real upgrade path (prerm upgrade, unpack, postinst
configure with the old version, the service restarted, the socket kept listening), which is
what callers see; the binaries do not need to differ for that.
"""

from __future__ import annotations

import json
import re
import secrets
import subprocess
import time
from pathlib import Path

from harness import scenario

CALL_TIMEOUT = 20
# Each call of the loop: its status and how long it took, in milliseconds.
CALL_LOOP = f"""
while [ ! -e /tmp/stop-calls ]; do
  start=$(date +%s%3N)
  if token=$(timeout {CALL_TIMEOUT + 5} tokenctl --timeout {CALL_TIMEOUT} token up 2>/tmp/call.err); then
    echo "ok $(( $(date +%s%3N) - start )) ${{token:0:12}}"
  else
    echo "FAILED($?) $(( $(date +%s%3N) - start )) $(tr '\\n' ' ' </tmp/call.err)"
  fi
  sleep 0.05
done
"""


def _repack_newer(debs: Path, work: Path) -> Path:
    """tokend and tokenctl repacked with the version's Debian revision raised (X-1 → X-1+upgrade1)."""
    out = work / "newer-debs"
    out.mkdir(exist_ok=True)
    for deb in sorted(debs.glob("*.deb")):
        if "dbgsym" in deb.name or not deb.name.startswith(("tokend_", "tokenctl_")):
            continue
        tree = work / ("tree-" + deb.stem)
        subprocess.run(["dpkg-deb", "-R", str(deb), str(tree)], check=True, timeout=120)
        control = (tree / "DEBIAN/control").read_text()
        version = re.search(r"^Version: (\S+)$", control, re.M).group(1)
        newer = version + "+upgrade1"
        control = control.replace(f"Version: {version}", f"Version: {newer}")
        # tokend Recommends tokenctl (= the same version).
        control = control.replace(f"(= {version})", f"(= {newer})")
        (tree / "DEBIAN/control").write_text(control)
        # gzip -1, not the package's xz: the same files, packed in seconds instead of minutes.
        subprocess.run(["dpkg-deb", "--root-owner-group", "-Zgzip", "-z1", "-b", str(tree),
                        str(out / deb.name.replace(version, newer))],
                       check=True, timeout=300, stdout=subprocess.DEVNULL)
        subprocess.run(["rm", "-rf", str(tree)], check=True)
    return out


@scenario("h-deb-upgrade", "upgrading the .deb under a Watch stream and a loop of token calls; remove and purge",
          mode="deb")
def deb_upgrade(host, checks):
    m = host.machine
    newer = _repack_newer(host.debs, host.work)
    # The machine's root is an overlay mounted on this host: the files go straight in.
    target = m.root / "var/cache/tokend-debs-newer"
    target.mkdir()
    for deb in newer.glob("*.deb"):
        subprocess.run(["cp", str(deb), str(target / deb.name)], check=True)

    token = host.add_credential("up", ["uid:0", "user:alice"])
    # The key sealed before the installation (docs/operations.md), else the one tokend generated.
    key_file = m.run(["sh", "-c", "ls /etc/credstore.encrypted/tokend.key /var/lib/tokend/tokend.key 2>/dev/null | head -1"]
                     ).out.strip()
    key_before = m.run(["sha256sum", key_file]).out.split()[0]
    socket_since = host.machine.show("tokend.socket", "ActiveEnterTimestampMonotonic")["ActiveEnterTimestampMonotonic"]
    pid_before = host.wait_active(60)

    # --show-token: the stream's lines name the token (test tokens only), to tell the next one.
    watch = host.background("watch", ["tokenctl", "watch", "up", "--show-token"], user="alice")
    m.wait_for("the Watch stream's first line", lambda: " up " in host.log_of("watch"), timeout=30)
    m.run(["rm", "-f", "/tmp/stop-calls"])
    calls = host.background("calls", ["bash", "-c", CALL_LOOP], user="alice")
    m.wait_for("token calls running", lambda: host.log_of("calls").count("ok ") >= 5, timeout=60)

    at = time.monotonic()
    upgrade = m.sh("DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "
                   "/var/cache/tokend-debs-newer/tokend_*.deb /var/cache/tokend-debs-newer/tokenctl_*.deb", check=False,
                   timeout=300)
    checks.note(f"apt-get install of the newer build took {time.monotonic() - at:.1f} s")
    checks.require(upgrade.status == 0, "apt-get installs the newer build over the running one", upgrade)
    pid_after = host.wait_active(60)
    checks.expect(pid_after != pid_before, "the upgrade restarted tokend", f"{pid_before} → {pid_after}")
    socket_now = host.machine.show("tokend.socket", "ActiveEnterTimestampMonotonic")["ActiveEnterTimestampMonotonic"]
    checks.expect(socket_now == socket_since, "tokend.socket kept listening through the upgrade", f"{socket_since} → {socket_now}")
    # Calls keep going for a few seconds against the new process.
    count = host.log_of("calls").count("ok ")
    m.wait_for("calls answered by the new tokend", lambda: host.log_of("calls").count("ok ") >= count + 5, timeout=60)

    new_token = _replace_token(host)
    m.wait_for("the Watch stream's line for the next token", lambda: new_token in host.log_of("watch"), timeout=60)
    checks.expect(watch.poll() is None and new_token in host.log_of("watch"),
                  "the Watch stream, reconnected after the upgrade, got the next token", host.log_of("watch"))
    m.run(["touch", "/tmp/stop-calls"])
    calls.wait(timeout=CALL_TIMEOUT + 10)
    lines = host.log_of("calls").splitlines()
    failed = [line for line in lines if line.startswith("FAILED")]
    slow = [line for line in lines if line.startswith("ok ") and int(line.split()[1]) > CALL_TIMEOUT * 1000]
    longest = max((int(line.split()[1]) for line in lines if line.startswith(("ok ", "FAILED"))), default=0)
    checks.note(f"{len(lines)} token calls during the upgrade; the longest took {longest} ms")
    checks.expect(not failed, "no token call failed", "\n".join(failed[:10]))
    checks.expect(not slow, f"no call waited past its {CALL_TIMEOUT} s timeout", "\n".join(slow[:10]))
    served = {line.split()[2] for line in lines if line.startswith("ok ") and len(line.split()) > 2}
    checks.expect(served <= {token[:12], new_token[:12]}, "every call got the credential's token", served)
    key_after = m.run(["sha256sum", key_file]).out.split()[0]
    checks.expect(key_after == key_before, f"the key stayed across the upgrade ({key_file})")
    checks.expect(host.tokenctl("token", "up").out.strip() == new_token, "the store stayed across the upgrade")
    m.end(watch)

    removal = m.sh("DEBIAN_FRONTEND=noninteractive apt-get remove -y -qq tokend tokenctl", check=False, timeout=300)
    checks.expect(removal.status == 0, "apt-get remove", removal)
    state = m.run(["systemctl", "is-active", "tokend.service", "tokend.socket"], check=False).out.split()
    checks.expect(all(s in ("inactive", "unknown") for s in state), "remove stops tokend and its socket", state)
    checks.expect(m.run(["test", "-f", "/var/lib/tokend/tokend.sqlite"], check=False).status == 0, "the store stays after remove")
    purge = m.sh("DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq tokend tokenctl", check=False, timeout=300)
    checks.expect(purge.status == 0, "apt-get purge", purge)
    gone = m.run(["sh", "-c", "ls -d /var/lib/tokend /etc/tokend /run/tokend 2>/dev/null"], check=False).out.split()
    checks.expect(not gone, "purge removes the state, the configuration and the runtime folder", gone)


def _replace_token(host) -> str:
    """The next token of credential `up`: the same credential given a new token response."""
    token = f"rh-up-{secrets.token_hex(12)}"
    response = {"access_token": token, "token_type": "Bearer", "expires_in": 3600,
                "refresh_token": f"refresh-{secrets.token_hex(12)}"}
    host.tokenctl("add", "up", "--provider", "realhost", "--reader", "uid:0", "--reader", "user:alice", "--replace",
                  input=json.dumps(response))
    return token

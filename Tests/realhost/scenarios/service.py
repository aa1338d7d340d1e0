"""tokend.service and tokend.socket under systemd: scenarios a to e of the real-host layer."""

from __future__ import annotations

import time

import docs
from harness import scenario
from host import messages, said

# Scenario d shortens the watchdog with a drop-in, so that a restart after the shipped 30 s does
# not cost CI half a minute; the unit's other settings (the abort path) stay as shipped.
TEST_WATCHDOG_SECONDS = 10
# What "a few seconds" after WatchdogSec may take: systemd's SIGABRT, the process's end, RestartSec=1s
# and the new process's start on a loaded machine.
WATCHDOG_SLACK_SECONDS = 10


@scenario("a-socket-activation", "socket activation, READY and the status line, a clean stop, activation again")
def socket_activation(host, checks):
    socket = host.systemctl("is-active", "tokend.socket", check=False).out.strip()
    checks.require(socket == "active", "tokend.socket listens after the installation", socket)
    host.systemctl("stop", "tokend.service")
    state = host.service("ActiveState")["ActiveState"]
    checks.expect(state == "inactive", "tokend.service is stopped before the first call", state)

    marker = host.now_us()
    host.tokenctl("status")  # the first connection starts tokend.service
    pid = host.wait_active(60)
    shown = host.service("Type", "StatusText", "TriggeredBy")
    checks.expect(shown["Type"] == "notify", "Type=notify", shown)
    checks.expect("tokend.socket" in shown["TriggeredBy"], "tokend.service was triggered by tokend.socket", shown)
    checks.expect(shown["StatusText"].startswith("serving "), "systemctl show has tokend's status line", shown)
    ready = said(host.journal_since(marker, f"_PID={pid}"), "tokend ready")
    checks.expect(ready, "tokend logged that it is ready (READY=1)", messages(host.journal_since(marker, f"_PID={pid}")))
    started = [m for m in messages(host.journal_since(marker, "_PID=1")) if m.startswith("Started tokend")]
    checks.expect(started, "systemd saw READY=1 (\"Started tokend…\")", started)

    token = host.add_credential("rh-a", ["uid:0", "user:alice"])
    served = host.tokenctl("token", "rh-a", user="alice").out.strip()
    checks.expect(served == token, "alice reads the credential", served)

    limit = float(host.service("TimeoutStopUSec")["TimeoutStopUSec"].rstrip("s") or 30)
    marker = host.now_us()
    at = time.monotonic()
    host.systemctl("stop", "tokend.service")
    took = time.monotonic() - at
    checks.note(f"systemctl stop took {took:.2f} s")
    shown = host.service("Result", "ExecMainCode", "ExecMainStatus", "ActiveState")
    checks.expect(took < limit, f"systemctl stop returns within TimeoutStopSec ({limit:.0f} s)", f"{took:.1f} s")
    checks.expect(
        shown["Result"] == "success" and shown["ExecMainCode"] == "1" and shown["ExecMainStatus"] == "0",
        "tokend exited by itself with status 0 (Result=success, no signal)", shown,
    )
    killed = [m for m in messages(host.journal_since(marker)) if "SIGKILL" in m or "Killing process" in m]
    checks.expect(not killed, "no SIGKILL during the stop", killed)
    socket = host.systemctl("is-active", "tokend.socket", check=False).out.strip()
    checks.expect(socket == "active", "tokend.socket still listens", socket)

    served = host.tokenctl("token", "rh-a", user="alice").out.strip()
    checks.expect(served == token, "the next call starts tokend again and gets the same token", served)
    again = host.wait_active(30)
    checks.expect(again != pid, "a new tokend process serves it", f"{pid} → {again}")


@scenario("b-clean-journal", "a clean start's journal holds only tokend's own structured records")
def clean_journal(host, checks):
    host.systemctl("stop", "tokend.service")
    host.systemctl("start", "tokend.service")
    pid = host.wait_active(60)
    # Calls that use the store's writer, the event loops and the refresh scheduler.
    host.add_credential("rh-b", ["uid:0", "user:alice"])
    host.tokenctl("token", "rh-b", user="alice")
    host.tokenctl("status")
    host.tokenctl("remove", "rh-b", check=False)
    host.systemctl("stop", "tokend.service")
    entries = host.machine.journal(f"_PID={pid}")
    checks.require(entries, "the journal has entries of tokend's process", pid)
    stray = [
        e for e in entries
        if e.get("_TRANSPORT") != "journal" or "CODE_FILE" not in e or e.get("SYSLOG_IDENTIFIER") != "tokend"
    ]
    listing = "\n".join(f"[{e.get('_TRANSPORT')}] {m}" for e, m in zip(stray, messages(stray), strict=False))
    checks.expect(not stray, f"all {len(entries)} entries of tokend's process carry tokend's fields", listing)
    host.tokenctl("status")  # started again for the next scenario


@scenario("c-reload", "systemctl reload applies a good configuration and fails visibly on a broken one")
def reload(host, checks):
    if host.machine.flavour == "minimal":
        present = host.machine.run(["sh", "-c", "ls /bin/kill /usr/bin/kill /sbin/kill 2>/dev/null"], check=False).out.split()
        checks.expect(not present, "the root holds only Debian's minbase and the package's dependencies (no kill program)", present)
    pid = host.ensure_running()
    original = host.config()
    token = host.add_credential("rh-c", ["uid:0"])
    try:
        host.add_config('\n[providers.reloaded]\nkind = "oauth2"\ntoken_endpoint = "http://127.0.0.1:9/token"\n'
                        'client_id = "reloaded"\nclient_auth = "none"\n')
        marker = host.now_us()
        at = time.monotonic()
        result = host.systemctl("reload", "tokend.service", check=False)
        checks.note(f"systemctl reload (valid change) took {time.monotonic() - at:.2f} s")
        checks.expect(result.status == 0, "systemctl reload succeeds for a valid change", result)
        logged = messages(host.journal_since(marker, "_SYSTEMD_UNIT=tokend.service"))
        checks.expect(any("configuration reloaded" in m for m in logged), "tokend logged the reload", logged)
        added = host.add_credential("rh-c2", ["uid:0"], provider="reloaded")
        checks.expect(added, "the new provider is in force (a credential of it is added)")

        # A typing error in an otherwise good provider: an unknown key.
        host.add_config('\n[providers.broken]\nkind = "oauth2"\ntoken_endpoint = "http://127.0.0.1:9/token"\n'
                        'client_id = "broken"\nclient_auth = "none"\nrefresh_att = 0.8\n')
        marker = host.now_us()
        at = time.monotonic()
        result = host.systemctl("reload", "tokend.service", check=False)
        checks.note(f"systemctl reload (broken file) took {time.monotonic() - at:.2f} s")
        checks.expect(result.status != 0, "systemctl reload fails for a broken configuration", result)
        logged = messages(host.journal_since(marker, "_SYSTEMD_UNIT=tokend.service"))
        checks.expect(any("providers.broken.refresh_att" in m for m in logged),
                      "the journal names the key (providers.broken.refresh_att)", "\n".join(logged))
        shown = host.service("ActiveState", "MainPID")
        checks.expect(shown["ActiveState"] == "active" and shown["MainPID"] == str(pid),
                      "the same tokend keeps running", shown)
        served = host.tokenctl("token", "rh-c").out.strip()
        checks.expect(served == token, "and keeps serving", served)
        kept = host.add_credential("rh-c3", ["uid:0"], provider="reloaded")
        checks.expect(kept, "with the configuration it had (provider reloaded still known)")
    finally:
        host.set_config(original)
        host.systemctl("reload", "tokend.service", check=False)
        for name in ("rh-c", "rh-c2", "rh-c3"):
            host.tokenctl("remove", name, check=False)


@scenario("d-watchdog", "the watchdog restarts a stopped tokend within WatchdogSec plus a few seconds")
def watchdog(host, checks):
    m = host.machine
    m.run(["mkdir", "-p", "/run/systemd/system/tokend.service.d"])
    m.write("/run/systemd/system/tokend.service.d/realhost-watchdog.conf",
            f"[Service]\nWatchdogSec={TEST_WATCHDOG_SECONDS}s\n")
    try:
        host.systemctl("daemon-reload")
        host.systemctl("restart", "tokend.service")
        pid = host.wait_active(60)
        token = host.add_credential("rh-d", ["uid:0", "user:alice"])
        marker = host.now_us()
        at = time.monotonic()
        host.systemctl("kill", "--signal=SIGSTOP", "tokend.service")

        def restarted():
            shown = host.service("MainPID", "ActiveState", "SubState")
            return shown["MainPID"] not in ("0", str(pid)) and shown["ActiveState"] == "active" and shown["SubState"] == "running"

        limit = TEST_WATCHDOG_SECONDS + WATCHDOG_SLACK_SECONDS
        # Wait well past the limit, to measure how long it really takes.
        m.wait_for("a new tokend after the watchdog fired", restarted, timeout=90)
        took = time.monotonic() - at
        checks.note(f"SIGSTOP to a new tokend serving: {took:.1f} s (WatchdogSec={TEST_WATCHDOG_SECONDS}s)")
        checks.expect(took <= limit, f"restarted within WatchdogSec + {WATCHDOG_SLACK_SECONDS} s", f"{took:.1f} s")
        logged = messages(host.journal_since(marker))
        checks.expect(any("Watchdog timeout" in line for line in logged), "systemd logged the watchdog timeout", logged)
        ended = [line for line in logged if "Main process exited" in line]
        checks.expect(ended and all("ABRT" in line for line in ended), "tokend ended on the watchdog's SIGABRT, not a later SIGKILL", ended)
        backtracer = [line for line in logged if "backtrace" in line.lower() or "executable stack" in line]
        checks.expect(not backtracer, "no crash handler ran in between", backtracer)
        served = host.tokenctl("token", "rh-d", user="alice").out.strip()
        checks.expect(served == token, "the new tokend serves the same credential", served)
    finally:
        m.run(["rm", "-rf", "/run/systemd/system/tokend.service.d"])
        host.systemctl("daemon-reload")
        host.systemctl("restart", "tokend.service")
        host.tokenctl("remove", "rh-d", check=False)


@scenario("e-encrypted-key", "the master key from LoadCredentialEncrypted=, sealed with systemd-creds (host key)")
def encrypted_key(host, checks):
    m = host.machine
    host.systemctl("restart", "tokend.service")
    pid = host.wait_active(60)
    loaded = said(m.journal(f"_PID={pid}"), "master key loaded")
    checks.require(loaded, "tokend logged where its master key came from")
    source = loaded[-1].get("SOURCE", "")
    checks.expect(source.startswith("systemd credential "), "the key came from the systemd credential (LoadCredentialEncrypted=)",
                  loaded[-1])
    files = m.run(["ls", "-A", "/var/lib/tokend"]).out.split()
    checks.expect("tokend.key" not in files, "no key file in the state directory", files)
    key = m.run(["systemd-creds", "decrypt", "--name=tokend.key", "/etc/credstore.encrypted/tokend.key", "-"]).out.strip()
    sealed = m.run(["cat", "/etc/credstore.encrypted/tokend.key"]).out
    checks.expect(key and key not in sealed, "the key file holds the key sealed (systemd-creds decrypt opens it)")
    token = host.add_credential("rh-e", ["uid:0"])

    # A host whose tokend generated its key file (the package's default): decrypt the key into
    # the key file and remove the credential store, then follow docs/operations.md to seal it.
    host.systemctl("stop", "tokend.service")
    m.sh("systemd-creds decrypt --name=tokend.key /etc/credstore.encrypted/tokend.key /var/lib/tokend/tokend.key"
         " && chown tokend:tokend /var/lib/tokend/tokend.key && chmod 0600 /var/lib/tokend/tokend.key"
         " && rm -rf /etc/credstore.encrypted")
    host.systemctl("start", "tokend.service")
    pid = host.wait_active(60)
    loaded = said(m.journal(f"_PID={pid}"), "master key loaded")
    checks.expect(loaded and loaded[-1].get("SOURCE", "").startswith("key file "), "without the credential, the key file", loaded)
    sealing = m.sh(docs.snippet("docs/operations.md", "seal-existing-key"), check=False, timeout=120)
    checks.expect(sealing.status == 0, "docs/operations.md: sealing a key tokend generated runs as written", sealing)
    pid = host.wait_active(60)
    loaded = said(m.journal(f"_PID={pid}"), "master key loaded")
    checks.expect(loaded and loaded[-1].get("SOURCE", "").startswith("systemd credential "),
                  "after sealing: the systemd credential", loaded)
    served = host.tokenctl("token", "rh-e").out.strip()
    checks.expect(served == token, "the store still opens with the same key", served)
    files = m.run(["ls", "-A", "/var/lib/tokend"]).out.split()
    checks.expect("tokend.key" not in files, "the key file is gone (shred -u)", files)
    host.tokenctl("remove", "rh-e", check=False)


# Each call: "ok" or "FAILED(status)", and how long it took in milliseconds.
RESTART_CALL_LOOP = """
while [ ! -e /tmp/stop-restart-calls ]; do
  start=$(date +%s%3N)
  if tokenctl --timeout 20 token rh-restart >/dev/null 2>/tmp/restart-call.$$.err; then
    echo "ok $(( $(date +%s%3N) - start ))"
  else
    echo "FAILED($?) $(( $(date +%s%3N) - start )) $(tr '\\n' ' ' </tmp/restart-call.$$.err)"
  fi
done
"""


@scenario("restart-under-calls", "restarts as a package upgrade makes them fail no call of programs asking meanwhile")
def restart_under_calls(host, checks):
    """systemctl daemon-reload, restart, daemon-reload (what the package's postinst does), many
    times, while programs ask for a token without pause: a connection tokend accepted just
    before a stop must be answered, and connections made meanwhile wait in the socket for the
    next tokend."""
    m = host.machine
    host.ensure_running()
    host.add_credential("rh-restart", ["uid:0", "user:alice"])
    m.run(["rm", "-f", "/tmp/stop-restart-calls"])
    loops = [host.background(f"restart-calls-{i}", ["bash", "-c", RESTART_CALL_LOOP], user="alice") for i in range(3)]
    try:
        m.wait_for("calls under way", lambda: host.log_of("restart-calls-0").count("ok ") >= 3, timeout=60)
        restarts = 15
        for _ in range(restarts):
            host.systemctl("reset-failed", "tokend.service", check=False)  # the start rate limit
            host.systemctl("daemon-reload")
            host.systemctl("restart", "tokend.service")
            host.systemctl("daemon-reload")
            host.wait_active()
    finally:
        m.run(["touch", "/tmp/stop-restart-calls"])
        for loop in loops:
            loop.wait(timeout=60)
        host.tokenctl("remove", "rh-restart", check=False)
    lines = [line for i in range(3) for line in host.log_of(f"restart-calls-{i}").splitlines()]
    failed = [line for line in lines if line.startswith("FAILED")]
    checks.note(f"{len(lines)} calls during {restarts} restarts; the longest took "
                f"{max((int(line.split()[1]) for line in lines), default=0)} ms")
    checks.expect(lines and not failed, "no call failed", "\n".join(failed[:10]))

"""Operator-facing examples run as written on the booted host (README, docs/operations.md,
docs/clients.md, the man page): each example an operator copies must work there.
"""

from __future__ import annotations

import os
import re
import secrets
import signal
import subprocess

import docs
from harness import scenario
from host import messages


@scenario("check-config-as-service", "tokend --check-config judges files as tokend.service will read them")
def check_config_as_service(host, checks):
    m = host.machine
    host.ensure_running()
    with host.restoring_config():
        m.write("/etc/tokend/realhost-secret", "s3cret-" + secrets.token_hex(8) + "\n", mode="0600", owner="root:root")
        host.add_config('\n[providers.confidential]\nkind = "oauth2"\ntoken_endpoint = "http://127.0.0.1:9/token"\n'
                        'client_id = "realhost"\nclient_secret_file = "realhost-secret"\n')
        as_root = m.run(["tokend", "--check-config"], check=False)
        as_service = m.run(["setpriv", "--reuid=tokend", "--regid=tokend", "--init-groups", "tokend", "--check-config"],
                           check=False)
        checks.note(f"as user tokend: {as_service.status} {as_service.err.strip()}")
        checks.expect(as_root.status == 78 and "client_secret_file" in as_root.err,
                      "run as root, it refuses a secret file that only root can read (status 78, naming the key)", as_root)
        reload = host.systemctl("reload", "tokend.service", check=False)
        checks.expect(reload.status != 0, "and so does systemctl reload", reload)
        m.run(["chgrp", "tokend", "/etc/tokend/realhost-secret"])
        m.run(["chmod", "0640", "/etc/tokend/realhost-secret"])
        as_root = m.run(["tokend", "--check-config"], check=False)
        checks.expect(as_root.status == 0 and "configuration OK" in as_root.out,
                      "readable by group tokend (0640): configuration OK", as_root)
        reload = host.systemctl("reload", "tokend.service", check=False)
        checks.expect(reload.status == 0, "and systemctl reload applies it", reload)
    m.run(["rm", "-f", "/etc/tokend/realhost-secret"])


@scenario("token-files", "token files as docs/operations.md and docs/clients.md set them up")
def token_files(host, checks):
    m = host.machine
    host.ensure_running()  # systemctl reload applies the change
    with host.restoring_config():
        setup = m.sh(docs.snippet("docs/operations.md", "token-files-folder"), check=False)
        checks.require(setup.status == 0, "docs/operations.md: the token folder's set-up runs as written", setup)
        host.add_config("\n" + docs.snippet("docs/operations.md", "token-files-config"))
        host.add_config("\n" + docs.snippet("docs/clients.md", "aws-token-file"))
        reload = host.systemctl("reload", "tokend.service", check=False)
        checks.expect(reload.status == 0, "systemctl reload takes both token files", reload)
        backup = host.add_credential("backup", ["uid:0"])
        aws = host.add_credential("alice", ["user:alice"])
        try:
            for path, token in (("/run/tokend/tokens/backup", backup), ("/run/tokend/tokens/alice-aws", aws)):
                m.wait_for(f"{path} written", lambda path=path: m.run(["test", "-s", path], check=False).status == 0,
                           timeout=30)
                shown = m.run(["stat", "-c", "%a %U:%G", path]).out.strip()
                checks.expect(shown == "640 tokend:tokend-readers", f"{path}: mode 0640, group tokend-readers", shown)
                read = m.run(["cat", path], user="alice", check=False)
                checks.expect(read.out == token, f"alice (in tokend-readers) reads {path}", read.err)
                refused = m.run(["cat", path], user="bob", check=False)
                checks.expect(refused.status != 0 and token not in refused.out, f"bob (not in it) cannot read {path}",
                              refused)
            said = messages(host.journal_since(0, "_SYSTEMD_UNIT=tokend.service"))
            checks.expect(not [line for line in said if "cannot create" in line], "no 'cannot create' in tokend's journal",
                          [line for line in said if "cannot create" in line])
        finally:
            host.tokenctl("remove", "backup", check=False)
            host.tokenctl("remove", "alice", check=False)


@scenario("store-examples", "docs/operations.md's [store] examples pass --check-config as written")
def store_examples(host, checks):
    m = host.machine
    installed = host.config()
    m.write("/etc/tokend/pg-password", "realhost-" + secrets.token_hex(8) + "\n", mode="0640", owner="root:tokend")
    try:
        for name in ("shared-store", "store-tls"):
            host.set_config(installed.rstrip("\n") + "\n\n" + docs.snippet("docs/operations.md", name))
            result = m.run(["tokend", "--check-config"], check=False)
            checks.expect(result.status == 0, f"the installed configuration plus the {name} example: configuration OK",
                          result)
    finally:
        host.set_config(installed)
        m.run(["rm", "-f", "/etc/tokend/pg-password"])


@scenario("man-page", "tokend(8) shows tokend's real synopsis and exit statuses")
def man_page(host, checks):
    m = host.machine
    page = m.run(["sh", "-c", f"zcat {host.prefix}/share/man/man8/tokend.8.gz"]).out
    synopsis = page.split(".Sh SYNOPSIS", 1)[-1].split(".Sh DESCRIPTION", 1)[0]
    checks.expect("subcommand" not in synopsis, "the synopsis names no subcommand (tokend has none)", synopsis)
    checks.expect(".It Em help" not in page, "no help subcommand is listed", page)
    help_run = m.run(["tokend", "help"], check=False)
    exits = page.split('.Sh "EXIT STATUS"', 1)[-1]
    statuses = {int(n) for n in re.findall(r"^\.It (\d+)", exits, re.M)}
    checks.expect({0, 1, 64, 78} <= statuses, "EXIT STATUS lists 0, 1, 64 (usage) and 78 (configuration)", exits)
    usage = m.run(["tokend", "--no-such-option"], check=False)
    checks.expect(usage.status == 64 and help_run.status == 64, "a usage error (also `tokend help`) exits 64",
                  f"{usage}\n{help_run}")
    m.write("/tmp/broken.toml", "[daemon]\nno_such_key = 1\n")
    broken = m.run(["tokend", "--check-config", "--config", "/tmp/broken.toml"], check=False)
    checks.expect(broken.status == 78, "a configuration error exits 78", broken)


@scenario("python-client-docs", "the Python client's install instructions respect PEP 668 (no pip into Debian's Python)")
def python_client_docs(host, checks):
    """Every paragraph that says `pip install ./clients/python` also says venv and python3-tokend:
    Debian's python3 refuses pip outside a virtual environment."""
    for path in ("README.md", "docs/clients.md", "clients/python/README.md"):
        paragraphs = re.split(r"\n\s*\n", (docs.REPO / path).read_text())
        said = [p for p in paragraphs if "pip install ./clients/python" in p]
        checks.expect(said, f"{path} says how to install the Python client")
        for paragraph in said:
            checks.expect("venv" in paragraph and "python3-tokend" in paragraph,
                          f"{path}: pip install ./clients/python only in a venv, beside the python3-tokend package",
                          paragraph)


@scenario("first-token-device", "docs/operations.md: a server without a browser, from installation to a first token")
def first_token_device(host, checks):
    m = host.machine
    checks.require(host.venv is not None, "the test IdP's venv is known (TOKEND_VENV; scripts/test sets it)")
    state = host.work / "idp"
    idp_out = host.work / "idp.out"
    idp_python = [str(host.venv / "bin/python"), str(docs.REPO / "Tests/idp/idp.py")]
    # The test IdP runs from this host's files in the machine's network namespace: tokend reaches
    # it on the machine's own loopback.
    with open(idp_out, "w") as out, open(host.work / "idp.err", "w") as err:
        idp = subprocess.Popen(
            ["nsenter", f"--target={m.leader}", "--net", "--", *idp_python, "serve", "--port", "0", "--state-dir",
             str(state), "--device-flow", "--device-interval", "1"],
            stdout=out, stderr=err, start_new_session=True,
        )

    def approve(login_log: str) -> None:
        code = m.wait_for("the user code", lambda: re.findall(r"User code: (\S+)", host.log_of(login_log)), timeout=60)[0]
        subprocess.run([*idp_python, "approve-device", "--state-dir", str(state), "--user-code", code], check=True,
                       timeout=60, stdout=subprocess.DEVNULL)

    try:
        port = m.wait_for("the IdP's READY line", lambda: re.findall(r"^READY (\d+)", idp_out.read_text(), re.M),
                          timeout=120)[0]
        with host.restoring_config():
            provider = docs.snippet("docs/operations.md", "first-token-provider")
            host.add_config("\n" + provider.replace("https://login.example.com", f"http://127.0.0.1:{port}"))
            reload = m.sh(docs.snippet("docs/operations.md", "first-token-reload"), check=False)
            checks.require(reload.status == 0, "the provider is checked and applied as written", reload)

            login = host.background("login", ["bash", "-c", docs.snippet("docs/operations.md", "first-token-login")],
                                    user="alice")
            approve("login")
            login.wait(timeout=60)
            checks.expect(login.returncode == 0, "alice logs in with the device flow, as written", host.log_of("login"))
            use = m.sh(docs.snippet("docs/operations.md", "first-token-use"), user="alice", check=False)
            checks.expect(use.status == 0 and "the program has its token" in use.out,
                          "alice's program gets the token as the example shows", use)
            status = host.tokenctl("status", "alice", "--json")
            checks.expect('"uid:1000"' in status.out, "the credential's reader is alice's uid", status.out)

            # An administrator logging in on someone's behalf names the reader (the sudo case).
            behalf = host.background("behalf", ["tokenctl", "login", "bobs", "--provider", "corp", "--device",
                                                "--reader", "user:bob"])
            approve("behalf")
            behalf.wait(timeout=60)
            read = host.tokenctl("token", "bobs", user="bob", check=False)
            checks.expect(behalf.returncode == 0 and read.status == 0 and read.out.strip(),
                          "root logs in for bob with --reader user:bob, and bob reads it", f"{host.log_of('behalf')}\n{read}")
            host.tokenctl("remove", "alice", check=False)
            host.tokenctl("remove", "bobs", check=False)
    finally:
        os.killpg(idp.pid, signal.SIGKILL)
        idp.wait(timeout=30)


@scenario("demo-colour", "scripts/demo is bold only on a terminal, and never with NO_COLOR", mode="dev")
def demo_colour(host, checks):
    """On this host (not in the machine): the demo's first heading, in its first seconds."""
    env = dict(os.environ, TOKEND_DEMO_LIMIT="4")
    if host.venv:
        env["TOKEND_VENV"] = str(host.venv)
    bold = "\x1b[1m"

    def first_output(command: list[str], **extra: str) -> str:
        result = subprocess.run(command, cwd=docs.REPO, env=dict(env, **extra), capture_output=True, text=True,
                                timeout=120)
        return result.stdout

    piped = first_output(["scripts/demo", "--no-build"])
    checks.require("== 1." in piped, "the demo printed its first heading", piped[-2000:])
    checks.expect(bold not in piped and "\x1b" not in piped, "into a pipe: no escape codes", repr(piped[:300]))
    # script(1) gives the demo a terminal.
    on_terminal = first_output(["script", "-qec", "scripts/demo --no-build", "/dev/null"])
    checks.expect(bold in on_terminal, "on a terminal: bold headings", repr(on_terminal[:300]))
    no_colour = first_output(["script", "-qec", "scripts/demo --no-build", "/dev/null"], NO_COLOR="1")
    checks.expect("== 1." in no_colour and bold not in no_colour, "on a terminal with NO_COLOR=1: none",
                  repr(no_colour[:300]))


@scenario("sandbox", "what tokend.service's sandbox lets tokend read and write, as docs/operations.md says")
def sandbox(host, checks):
    m = host.machine
    host.ensure_running()
    with host.restoring_config():
        # Files the service cannot see: ProtectHome= hides /home, PrivateTmp= gives it its own /tmp.
        # --check-config (as user tokend, but outside the unit) reads them; the service does not.
        for path in ("/home/alice/realhost-secret", "/tmp/realhost-secret"):
            m.write(path, "s3cret\n", mode="0644", owner="root:root")
            host.set_config(host.config().split("\n[providers.hidden]")[0]
                            + f'\n[providers.hidden]\nkind = "oauth2"\ntoken_endpoint = "http://127.0.0.1:9/token"\n'
                            f'client_id = "realhost"\nclient_secret_file = "{path}"\n')
            checked = m.run(["tokend", "--check-config"], check=False)
            reload = host.systemctl("reload", "tokend.service", check=False)
            checks.expect(checked.status == 0 and reload.status != 0,
                          f"{path}: --check-config reads it, the service cannot (reload refused)", f"{checked}\n{reload}")
            m.run(["rm", "-f", path])
        host.set_config(host.config().split("\n[providers.hidden]")[0])
        host.systemctl("reload", "tokend.service")

        # Token files outside tokend's own directories: ProtectSystem=strict makes them
        # read-only, until a drop-in names the folder in ReadWritePaths=.
        m.run(["install", "-d", "-m", "0750", "-o", "tokend", "-g", "tokend", "/var/lib/realhost-tokens"])
        host.add_config('\n[token_files.rh-sandbox]\npath = "/var/lib/realhost-tokens/rh-sandbox"\nmode = "0640"\n')
        host.systemctl("reload", "tokend.service")
        marker = host.now_us()
        host.add_credential("rh-sandbox", ["uid:0"])

        def written() -> bool:
            return m.run(["test", "-s", "/var/lib/realhost-tokens/rh-sandbox"], check=False).status == 0

        refused = m.wait_for("tokend to log the failed write", lambda: [
            line for line in messages(host.journal_since(marker, "_SYSTEMD_UNIT=tokend.service"))
            if "writing a token file failed" in line], timeout=30)
        checks.expect(not written() and "Read-only file system" in refused[0],
                      "a token file under /var/lib (not tokend's) is refused: read-only", refused)
        m.run(["mkdir", "-p", "/etc/systemd/system/tokend.service.d"])
        m.write("/etc/systemd/system/tokend.service.d/realhost-tokens.conf",
                "[Service]\nReadWritePaths=/var/lib/realhost-tokens\n")
        host.systemctl("daemon-reload")
        host.systemctl("restart", "tokend.service")
        host.wait_active()
        checks.expect(m.wait_for("the token file", written, timeout=30),
                      "with ReadWritePaths=/var/lib/realhost-tokens (systemctl edit tokend) it is written")
        m.run(["rm", "-rf", "/etc/systemd/system/tokend.service.d", "/var/lib/realhost-tokens"])
        host.systemctl("daemon-reload")
        host.systemctl("restart", "tokend.service")
        host.tokenctl("remove", "rh-sandbox", check=False)

    # exe: readers: tokend (no CAP_SYS_PTRACE) reads the executable of its own uid's programs only.
    exe = f"{host.prefix}/bin/tokenctl"
    token = host.add_credential("rh-exe", [f"exe:{exe}"])
    try:
        for user in ("root", "alice"):
            other = m.run(["tokenctl", "--timeout", "20", "token", "rh-exe"], user=user, check=False)
            checks.expect(other.status != 0 and token not in other.out,
                          f"exe:{exe} does not match {exe} run by {user} (another uid than tokend's)", other)
        own = m.run(["setpriv", "--reuid=tokend", "--regid=tokend", "--clear-groups", "tokenctl", "--timeout", "20",
                     "token", "rh-exe"], check=False)
        checks.expect(own.status == 0 and own.out.strip() == token, f"it matches {exe} run as user tokend", own)
    finally:
        host.tokenctl("remove", "rh-exe", check=False)

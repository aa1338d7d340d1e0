"""The audit trail in the real journal: a token read from a unit is a record with its MESSAGE_ID."""

from __future__ import annotations

import hashlib

import docs
from harness import scenario

RELEASED = "52708dab149a40cd9828dcaa8cc14222"
REFUSED = "37506a5cbb314d1fabed871e2c249211"


@scenario("audit-journal", "a read from a unit and a refusal are journal records with their MESSAGE_ID and fields")
def audit_journal(host, checks):
    host.ensure_running()
    with host.restoring_config():
        # Off by default: turned on as docs/configuration.md says, applied by a reload.
        host.add_config("\n[audit]\nenabled = true\n")
        reloaded = host.systemctl("reload", "tokend.service", check=False)
        checks.require(reloaded.status == 0, "tokend reloads with [audit] enabled = true", reloaded)
        _audit_journal(host, checks)


def _audit_journal(host, checks):
    m = host.machine
    host.tokenctl("remove", "alice", check=False)
    token = host.add_credential("alice", ["uid:0", "unit:audit-demo.service"])
    try:
        marker = host.now_us()
        read = m.run(["systemd-run", "--wait", "--pipe", "--quiet", "--unit=audit-demo.service",
                      "tokenctl", "token", "alice"], check=False, timeout=60)
        checks.require(read.out.strip() == token, "audit-demo.service reads alice's token", read)
        refused = host.tokenctl("token", "alice", user="bob", check=False)
        checks.expect(refused.status != 0, "bob is refused alice's token", refused)

        def records(message_id):
            return [e for e in host.journal_since(marker, f"MESSAGE_ID={message_id}")
                    if e.get("USER_IDENTIFIER") == "alice"]

        released = m.wait_for("the release's record", lambda: records(RELEASED), timeout=30)[0]
        checks.expect(released.get("_SYSTEMD_UNIT") == "tokend.service", "written by tokend.service", released)
        checks.expect(released.get("AUDIT_CALLER_UNIT") == "audit-demo.service", "AUDIT_CALLER_UNIT names the unit", released)
        checks.expect(released.get("AUDIT_METHOD") == "ProvideTokenReplacement", "AUDIT_METHOD", released)
        checks.expect(released.get("AUDIT_CALLER_UID") == "0", "AUDIT_CALLER_UID", released)
        fingerprint = hashlib.sha256(token.encode()).hexdigest()[:16]
        checks.expect(released.get("AUDIT_TOKEN_SHA256") == fingerprint, "AUDIT_TOKEN_SHA256 matches sha256sum", released)
        denied = m.wait_for("the refusal's record", lambda: records(REFUSED), timeout=30)[0]
        checks.expect(denied.get("AUDIT_CALLER_UID") == "1001" and denied.get("AUDIT_REASON", "").startswith("not a reader"),
                      "the refusal names bob's uid and the reason", denied)
        everything = m.run(["journalctl", "--boot", "-o", "json", "--no-pager", "-u", "tokend"], timeout=60).out
        checks.expect(token not in everything, "the token is in no journal entry of tokend")

        # The operator's query of docs/operations.md, as written.
        shown = m.sh(docs.snippet("docs/operations.md", "audit-query"), check=False)
        checks.expect(shown.status == 0 and "audit-demo.service" in shown.out, "the documented query shows the read", shown)
        checks.note("docs/operations.md audit-query output:\n" + shown.out)
        shown = m.sh(docs.snippet("docs/operations.md", "audit-refusals"), check=False)
        checks.expect(shown.status == 0 and "uid=1001" in shown.out.replace("audit_caller_uid=", "uid="),
                      "the documented refusals query shows bob", shown)
        checks.note("docs/operations.md audit-refusals output:\n" + shown.out)
    finally:
        host.tokenctl("remove", "alice", check=False)

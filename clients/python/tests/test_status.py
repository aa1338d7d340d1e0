"""What Status says beyond a credential's state: when a new login is needed and why, and the
caller's use of its per-uid limits, from the real tokend; and how malformed fields are refused."""

from __future__ import annotations

import datetime as dt
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import DPOP_PROVIDER, PROVIDER, Daemon, idp_provider, remove_scratch, scratch_directory

import tokend

#: A provider of the test IdP whose logins end two hours after their first token.
SESSION_PROVIDER = "session"
#: The per-uid limits of the daemon these tests start (none is the default).
LIMITS = {"max_connections_per_uid": 9, "max_credentials_per_uid": 7, "max_calls_in_flight_per_uid": 5}


@pytest.fixture
def limited(idp) -> Iterator[Daemon]:
    """A tokend of its own with the per-uid ``LIMITS`` and the provider ``SESSION_PROVIDER``."""
    directory = scratch_directory()
    process = Daemon(
        directory,
        idp,
        extra_daemon="".join("%s = %d\n" % item for item in LIMITS.items()),
        extra_providers=idp_provider(SESSION_PROVIDER, idp, 'max_session_age = "2h"\n'),
    )
    try:
        process.start()
        yield process
        assert process.stop() == 0, "tokend did not stop cleanly: %s" % process.log()
    finally:
        process.stop()
        remove_scratch(directory)


def expected_unit() -> str | None:
    """The unit the system manager put this process in: the first component below the slices of
    its cgroup v2 path (else of the legacy ``name=systemd`` one), one leading ``_`` removed, if it
    is a ``.service`` or ``.scope``: the unit tokend reports for it; ``None`` outside any unit."""
    paths = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if (hierarchy, controllers) == ("0", ""):
            paths["unified"] = path
        elif controllers == "name=systemd":
            paths["legacy"] = path
    unified = paths.get("unified", "/")
    path = unified if unified != "/" else paths.get("legacy", "")
    names = [part[1:] if part.startswith("_") else part for part in path.split("/") if part]
    first = next((name for name in names if not name.endswith(".slice")), None)
    return first if first is not None and first.endswith((".service", ".scope")) else None


def test_status_says_when_a_new_login_is_needed_and_why(limited, pool):
    with tokend.Client(limited.socket_path, timeout=10) as client:
        client.add_token_response("py-session", SESSION_PROVIDER, pool.take())
        client.add_token_response("py-refreshable", PROVIDER, pool.take())
        client.add_credential("py-dpop", DPOP_PROVIDER, "py-status-dpop-token", token_type="DPoP", expires_in=3600)

        # The login ends max_session_age after its first token, whatever the refresh token could do.
        session = client.status("py-session").credentials[0]
        assert session.relogin_reason == "session_end"
        assert session.relogin_by is not None and session.relogin_by.tzinfo is not None
        assert session.relogin_by == session.session_ends_at == session.session_started_at + dt.timedelta(hours=2)
        assert session.token_type == "Bearer"

        # Nothing can renew a token without a refresh token: its expiry is the end.
        dpop = client.status("py-dpop").credentials[0]
        assert (dpop.relogin_reason, dpop.relogin_by, dpop.token_type) == ("token_expiry", dpop.expires_at, "DPoP")

        # A refresh token without a known end, on a provider without max_session_age: no end known.
        refreshable = client.status("py-refreshable").credentials[0]
        assert (refreshable.relogin_by, refreshable.relogin_reason, refreshable.token_type) == (None, None, "Bearer")


def test_status_gives_the_callers_quota_usage(limited):
    with tokend.Client(limited.socket_path, timeout=10) as client, tokend.Client(limited.socket_path, timeout=10) as other:
        # Two credentials read by this uid alone count; one that a group reads too does not.
        for name in ("py-held-1", "py-held-2"):
            client.add_credential(name, PROVIDER, "py-quota-%s" % name, expires_in=3600)
        client.add_credential(
            "py-shared", PROVIDER, "py-quota-shared", expires_in=3600, readers=["uid:%d" % os.getuid(), "gid:%d" % os.getgid()]
        )
        assert other.status("py-shared").credentials  # the second client's connection is open too

        # The daemon counts a connection once it accepted it: wait (bounded) until it has both.
        deadline = time.monotonic() + 10
        caller = client.status().daemon.caller  # type: ignore[union-attr]
        while caller is not None and caller.connections != 2 and time.monotonic() < deadline:
            time.sleep(0.05)
            caller = client.status().daemon.caller  # type: ignore[union-attr]

    assert caller == tokend.QuotaUsage(
        uid=os.getuid(),
        administrator=os.getuid() == 0,  # root always is; the test daemon has no admin_groups
        connections=2,
        max_connections=LIMITS["max_connections_per_uid"],
        credentials=2,
        max_credentials=LIMITS["max_credentials_per_uid"],
        calls_in_flight=0,
        max_calls_in_flight=LIMITS["max_calls_in_flight_per_uid"],
        unit=expected_unit(),
        executable=os.readlink("/proc/self/exe"),  # this interpreter, as the kernel names it
    )


CALLER = {
    "uid": 1000, "administrator": False, "connections": 1, "maxConnections": 9, "credentials": 2, "maxCredentials": 7,
    "callsInFlight": 0, "maxCallsInFlight": 5, "unit": "app.service", "executable": "/usr/bin/app",
}
DAEMON = {
    "version": "0.1.0", "startedAt": 1700000000, "credentials": 1, "valid": 1, "refreshing": 0, "retrying": 0,
    "reauthenticationRequired": 0, "expired": 0, "caller": CALLER,
}
CREDENTIAL = {
    "userIdentifier": "alice", "provider": "idp", "state": "valid", "expiresAt": 1700003600, "issuedAt": 1700000000,
    "sessionStartedAt": 1700000000, "sessionEndsAt": 1700007200, "refreshCount": 0, "readers": ["uid:1000"],
    "enrolledByUid": 1000, "tokenType": "Bearer", "reloginBy": 1700007200, "reloginReason": "session_end",
}


def reply(daemon: Any = DAEMON, credential: Any = CREDENTIAL) -> dict[str, Any]:
    return {"daemon": daemon, "credentials": [credential]}


def test_the_new_fields_are_read_with_their_types():
    status = tokend.Status.from_wire(reply())
    assert status.daemon is not None and status.daemon.caller == tokend.QuotaUsage(
        uid=1000, administrator=False, connections=1, max_connections=9, credentials=2, max_credentials=7,
        calls_in_flight=0, max_calls_in_flight=5, unit="app.service", executable="/usr/bin/app",
    )
    entry = status.credentials[0]
    assert entry.relogin_by == dt.datetime(2023, 11, 15, 0, 13, 20, tzinfo=dt.UTC)
    assert (entry.relogin_reason, entry.token_type) == ("session_end", "Bearer")
    # Optional ones may be missing or null.
    bare = tokend.Status.from_wire(
        reply({**DAEMON, "caller": None}, {key: value for key, value in CREDENTIAL.items() if key not in ("reloginBy", "reloginReason")})
    )
    assert bare.daemon is not None and bare.daemon.caller is None
    assert (bare.credentials[0].relogin_by, bare.credentials[0].relogin_reason) == (None, None)
    without = {key: value for key, value in CALLER.items() if key not in ("unit", "executable")}
    caller = tokend.Status.from_wire(reply({**DAEMON, "caller": without})).daemon.caller  # type: ignore[union-attr]
    assert caller is not None and (caller.unit, caller.executable) == (None, None)


@pytest.mark.parametrize(
    ("parameters", "named"),
    [
        (reply(credential={**CREDENTIAL, "reloginBy": "soon"}), "'reloginBy'"),
        (reply(credential={**CREDENTIAL, "reloginBy": 10**20}), "'reloginBy' is out of range"),
        (reply(credential={**CREDENTIAL, "reloginReason": 3}), "'reloginReason' is not a string"),
        (reply(credential={**CREDENTIAL, "tokenType": ["Bearer"]}), "'tokenType' is not a string"),
        (reply({**DAEMON, "caller": "uid:1000"}), "'caller' is not an object"),
        (reply({**DAEMON, "caller": {**CALLER, "maxConnections": "9"}}), "'caller' is a quota usage without an integer 'maxConnections'"),
        (reply({**DAEMON, "caller": {**CALLER, "administrator": "no"}}), "'caller' is a quota usage without a boolean 'administrator'"),
        (reply({**DAEMON, "caller": {**CALLER, "uid": True}}), "without an integer 'uid'"),
        (reply({**DAEMON, "caller": {k: v for k, v in CALLER.items() if k != "callsInFlight"}}), "without an integer 'callsInFlight'"),
        (reply({**DAEMON, "caller": {**CALLER, "executable": 7}}), "'executable' is not a string"),
    ],
)
def test_a_malformed_field_is_a_protocol_error_naming_it(parameters, named):
    with pytest.raises(tokend.ProtocolError) as caught:
        tokend.Status.from_wire(parameters)
    assert named in str(caught.value)

"""tokend.Client against the real tokend and the real test IdP."""

from __future__ import annotations

import datetime as dt
import os
import pickle
import socket
import threading
import time

import pytest
from helpers import PROVIDER, Daemon, FullAcceptQueue, SilentServer, remove_scratch, scratch_directory

import tokend
from tokend._errors import error_from_reply


def now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def test_token_returns_the_stored_credentials(client, user, enrolled):
    credentials = client.token(user)

    assert credentials.user_identifier == user
    assert credentials.access_token == enrolled["access_token"]
    assert credentials.token_type == "Bearer"
    assert credentials.scope == "read"
    assert credentials.expires_at.tzinfo is not None and credentials.expires_at.utcoffset() == dt.timedelta(0)
    assert abs((credentials.expires_at - now()).total_seconds() - enrolled["expires_in"]) < 60
    assert credentials.issued_at is not None and abs((credentials.issued_at - now()).total_seconds()) < 60
    assert credentials.authorization_header() == "Bearer " + enrolled["access_token"]
    # The token never shows in repr() or str(); the other fields do.
    assert enrolled["access_token"] not in repr(credentials)
    assert enrolled["access_token"] not in str(credentials)
    assert user in repr(credentials)


def test_min_valid_forces_exactly_one_refresh_at_the_idp(client, idp, user):
    response = idp.mint(count=1, lifetime=60)[0]
    client.add_token_response(user, PROVIDER, response)
    grants = idp.count_posts()

    fresh = client.token(user, min_valid=120)

    assert fresh.access_token != response["access_token"]
    assert (fresh.expires_at - now()).total_seconds() > 120
    assert idp.count_posts() == grants + 1
    # The IdP issued it (and forgot the old token: a refresh deletes the previous access token).
    assert idp.introspect(fresh.access_token)["active"] is True
    assert idp.introspect(response["access_token"])["active"] is False
    # Now valid long enough: no further grant.
    again = client.token(user, min_valid=dt.timedelta(minutes=2))
    assert again.access_token == fresh.access_token
    assert idp.count_posts() == grants + 1


def test_rejected_current_token_is_replaced_and_a_stale_one_gets_the_current(client, idp, user, enrolled):
    first = client.token(user)
    grants = idp.count_posts()

    second = client.token(user, rejected=first.access_token)
    assert second.access_token != first.access_token
    assert idp.count_posts() == grants + 1

    # The refused token is stale now: tokend answers with the current one, no grant.
    third = client.token(user, rejected=first.access_token)
    assert third.access_token == second.access_token
    assert idp.count_posts() == grants + 1


def test_second_forced_refresh_within_the_interval_is_refresh_failed(client, user, enrolled):
    first = client.token(user)
    second = client.token(user, rejected=first.access_token)

    with pytest.raises(tokend.RefreshFailed) as caught:
        client.token(user, rejected=second.access_token)

    error = caught.value
    assert isinstance(error, tokend.TokendError)
    assert error.user_identifier == user
    assert error.error_name == "io.tokend.TokenProvider.RefreshFailed"
    assert error.reason
    assert error.retry_at is not None and now() < error.retry_at <= now() + dt.timedelta(seconds=31)
    # The rejected token is in the call, never in the error.
    for text in (str(error), repr(error), repr(error.parameters), error.message):
        assert second.access_token not in text
    # The connection is still good after an error reply.
    assert client.token(user).access_token == second.access_token


def test_unknown_user(client):
    with pytest.raises(tokend.UnknownUser) as caught:
        client.token("py-nobody-has-this-user")
    assert caught.value.user_identifier == "py-nobody-has-this-user"
    assert "py-nobody-has-this-user" in str(caught.value)
    assert caught.value.method == "io.tokend.TokenProvider.ProvideTokenReplacement"


def test_typed_errors_of_add_credential(client, user, enrolled, pool):
    other = pool.take()
    with pytest.raises(tokend.CredentialExists) as exists:
        client.add_token_response(user, PROVIDER, other)
    assert exists.value.user_identifier == user

    with pytest.raises(tokend.UnknownProvider) as unknown:
        client.add_token_response(user + "-x", "no-such-provider", other)
    assert unknown.value.provider == "no-such-provider"

    with pytest.raises(tokend.InvalidCredential) as invalid:
        client.add_credential(user + "-y", PROVIDER, other["access_token"] + "\n", other["refresh_token"], expires_in=60)
    assert invalid.value.reason == "access_token contains characters a token cannot have"
    for error in (exists.value, unknown.value, invalid.value):
        assert other["access_token"] not in str(error) and other["access_token"] not in repr(error.parameters)
        assert other["refresh_token"] not in str(error)

    # replace=True does replace.
    client.add_token_response(user, PROVIDER, other, replace=True)
    assert client.token(user).access_token == other["access_token"]


def test_permission_denied_for_a_credential_read_by_another_uid(client, user, pool):
    client.add_token_response(user, PROVIDER, pool.take(), readers=["uid:4242"])
    with pytest.raises(tokend.PermissionDenied) as caught:
        client.token(user)
    assert caught.value.user_identifier == user
    assert client.status(user).credentials[0].readers == ("uid:4242",)


def test_reauthentication_required_after_the_refresh_token_is_revoked(client, idp, user, enrolled):
    idp.revoke_refresh_token(enrolled["refresh_token"])
    grants = idp.count_posts()

    with pytest.raises(tokend.ReauthenticationRequired) as caught:
        client.token(user, min_valid=7200)  # longer than the token lives: tokend must refresh

    assert caught.value.reason == "invalid_grant"
    assert caught.value.user_identifier == user
    assert idp.count_posts() == grants + 1
    assert client.status(user).credentials[0].state == "reauthentication_required"


def test_remove_credential_then_unknown_user(client, user, enrolled):
    client.remove_credential(user)
    with pytest.raises(tokend.UnknownUser):
        client.token(user)
    with pytest.raises(tokend.UnknownUser):
        client.remove_credential(user)


def test_status(client, user, enrolled):
    status = client.status(user)
    assert status.daemon is not None and status.daemon.version
    assert status.daemon.credentials >= 1
    assert [c.user_identifier for c in status.credentials] == [user]
    entry = status.credentials[0]
    assert entry.provider == PROVIDER and entry.state == "valid"
    assert entry.readers == ("uid:%d" % os.getuid(),)
    assert entry.enrolled_by_uid == os.getuid()
    assert entry.expires_at > now()
    everything = client.status()
    assert user in [c.user_identifier for c in everything.credentials]
    assert enrolled["access_token"] not in repr(everything)


def test_status_of_all_credentials_collects_the_streamed_batches(client, user):
    # tokend streams Status with `more` in batches of 100: 150 credentials take two replies.
    names = ["%s-%03d" % (user, i) for i in range(150)]
    try:
        for i, name in enumerate(names):
            client.add_credential(name, PROVIDER, "status-batch-token-%03d" % i, expires_in=3600)
        status = client.status()
        listed = [c.user_identifier for c in status.credentials]
        assert set(names) <= set(listed)
        assert len(listed) == len(set(listed)) == status.daemon.credentials
        replies = client._call("Status", {}, more=True)
        assert len(replies) >= 2 and "daemon" in replies[0] and "daemon" not in replies[1]
    finally:
        for name in names:
            try:
                client.remove_credential(name)
            except tokend.UnknownUser:
                pass


def test_raw_calls_map_varlink_service_errors(client, user, enrolled):
    with pytest.raises(tokend.MethodNotFound):
        client.call("io.tokend.TokenProvider.NoSuchMethod")
    with pytest.raises(tokend.InvalidParameter) as caught:
        client.call("ProvideTokenReplacement", {"userIdentifier": 42})
    assert caught.value.parameter == "userIdentifier"
    assert isinstance(caught.value, tokend.ProtocolError)
    with pytest.raises(tokend.ExpectedMore):
        client.call("Watch", {"userIdentifier": user})
    info = client.call("org.varlink.service.GetInfo")
    assert "io.tokend.TokenProvider" in info["interfaces"]
    # Error replies leave the connection usable.
    assert client.token(user).access_token == enrolled["access_token"]


def test_a_message_too_large_for_the_daemon_then_a_fresh_connection(client, user, enrolled):
    # tokend answers InvalidMessage and closes the connection (max_message_bytes, 64 KiB).
    with pytest.raises(tokend.ProtocolError) as caught:
        client.call("ProvideTokenReplacement", {"userIdentifier": "x" * 100000})
    assert caught.value.error_name == "io.tokend.TokenProvider.InvalidMessage"
    closed = client._connection
    # The next call notices the closed connection and opens a new one by itself.
    assert client.token(user).access_token == enrolled["access_token"]
    assert client._connection is not closed


def test_missing_socket_is_daemon_unavailable_naming_the_path(tmp_path):
    path = str(tmp_path / "no-tokend-here.sock")
    client = tokend.Client(path, timeout=2)
    started = time.monotonic()
    with pytest.raises(tokend.DaemonUnavailable) as caught:
        client.token("alice")
    assert time.monotonic() - started < 2
    assert path in str(caught.value)
    assert caught.value.socket_path == path


def test_socket_without_a_listener_is_daemon_unavailable(tmp_path):
    path = str(tmp_path / "stale.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as stale:
        stale.bind(path)  # a socket file nobody listens on, as a crashed daemon leaves behind
        with pytest.raises(tokend.DaemonUnavailable) as caught:
            tokend.Client(path, timeout=2).token("alice")
    assert path in str(caught.value) and "refused" in str(caught.value)


def test_a_daemon_that_never_answers_times_out_within_the_bound(tmp_path):
    server = SilentServer(str(tmp_path / "silent.sock"))
    try:
        client = tokend.Client(server.path, timeout=0.5)
        started = time.monotonic()
        with pytest.raises(tokend.Timeout) as caught:
            client.token("alice", rejected="secret-token-value")
        elapsed = time.monotonic() - started
        assert 0.45 <= elapsed < 2.0
        assert server.path in str(caught.value)
        assert "secret-token-value" not in str(caught.value)
        assert b'"method":"io.tokend.TokenProvider.ProvideTokenReplacement"' in server.received
        # The timed-out connection is dropped (its reply would be out of order): a new one is used.
        with pytest.raises(tokend.Timeout):
            client.token("alice")
        assert server.connections == 2
    finally:
        server.close()


def test_a_full_accept_queue_delays_the_call_instead_of_failing_it(tmp_path):
    """A Unix socket whose accept queue is full refuses a connect at once (EAGAIN): the client
    tries again until its timeout, so a burst of other clients delays a call, not fails it."""
    queue = FullAcceptQueue(str(tmp_path / "full.sock"))
    try:
        outcome: dict[str, BaseException] = {}

        def call() -> None:
            try:
                tokend.Client(queue.path, timeout=20).token("alice")
            except BaseException as error:
                outcome["error"] = error

        thread = threading.Thread(target=call)
        thread.start()
        thread.join(0.3)  # a client that does not wait has failed by now
        if thread.is_alive():
            assert queue.answer_once(b"this is not json\0")
        thread.join(20)
        # It reached the server and read its answer (which is not Varlink).
        assert isinstance(outcome.get("error"), tokend.ProtocolError), outcome
    finally:
        queue.close()


def test_a_reply_that_is_not_varlink_is_a_protocol_error(tmp_path):
    server = SilentServer(str(tmp_path / "garbage.sock"), reply=b"this is not json\0")
    try:
        with pytest.raises(tokend.ProtocolError) as caught:
            tokend.Client(server.path, timeout=2).token("alice")
        assert "not JSON" in str(caught.value)
    finally:
        server.close()


def test_socket_comes_from_the_environment(monkeypatch, daemon, user, enrolled):
    monkeypatch.setenv("TOKEND_SOCKET", daemon.socket_path)
    assert tokend.Client().socket_path == daemon.socket_path
    assert tokend.Client().token(user).access_token == enrolled["access_token"]
    monkeypatch.setenv("TOKEND_SOCKET", "")
    assert tokend.Client().socket_path == tokend.DEFAULT_SOCKET_PATH == "/run/tokend/io.tokend"
    monkeypatch.delenv("TOKEND_SOCKET")
    assert tokend.Client().socket_path == "/run/tokend/io.tokend"
    assert tokend.Client("/x/y.sock").socket_path == "/x/y.sock"


def test_one_connection_serves_many_threads(client, idp, user, enrolled):
    grants = idp.count_posts()
    results = []
    errors = []

    def work():
        try:
            for _ in range(10):
                results.append(client.token(user).access_token)
        except Exception as error:  # pragma: no cover - reported below
            errors.append(error)

    client.token(user)
    connection = client._connection
    threads = [threading.Thread(target=work) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not errors
    assert results == [enrolled["access_token"]] * 80
    assert client._connection is connection  # reused, never reopened
    assert idp.count_posts() == grants


def test_reconnects_after_the_daemon_restarts(idp, pool):
    directory = scratch_directory()
    daemon = Daemon(directory, idp)
    daemon.start()
    try:
        client = tokend.Client(daemon.socket_path, timeout=5)
        response = pool.take()
        client.add_token_response("restarted", PROVIDER, response)
        assert client.token("restarted").access_token == response["access_token"]
        with client.watch("restarted") as updates:
            assert next(updates).access_token == response["access_token"]
            assert daemon.stop() == 0
            # The watch stream ends when the daemon goes away.
            with pytest.raises(tokend.DaemonUnavailable):
                next(updates)
        with pytest.raises(tokend.DaemonUnavailable) as caught:
            client.token("restarted")
        assert daemon.socket_path in str(caught.value)
        daemon.start()
        # Same client, new connection; the credential survived in the store.
        assert client.token("restarted").access_token == response["access_token"]
        assert daemon.stop() == 0
        daemon.start()
        # The idle connection was closed by the stop: the next call reconnects by itself.
        assert client.token("restarted").access_token == response["access_token"]
        client.close()
    finally:
        daemon.stop()
        remove_scratch(directory)


def test_error_mapping_of_names_the_daemon_may_add_later():
    call = {"userIdentifier": "alice", "rejectedToken": "tok-SECRET"}
    quota = error_from_reply("io.tokend.TokenProvider.QuotaExceeded", {"limit": 5}, "m", call)
    assert type(quota) is tokend.QuotaExceeded and quota.limit == 5
    unknown = error_from_reply("io.tokend.TokenProvider.SomethingNew", {"why": "has tok-SECRET in it"}, "m", call)
    assert type(unknown) is tokend.ProtocolError
    assert unknown.error_name == "io.tokend.TokenProvider.SomethingNew"
    assert unknown.parameters == {"why": "<redacted>"}
    assert "tok-SECRET" not in str(unknown)
    copy = pickle.loads(pickle.dumps(quota))
    assert type(copy) is tokend.QuotaExceeded and copy.limit == 5 and str(copy) == str(quota)


def test_arguments_are_checked_before_anything_is_sent(client):
    with pytest.raises(ValueError):
        tokend.Client(timeout=0)
    with pytest.raises(ValueError):
        client.token("alice", min_valid=-1)
    with pytest.raises(tokend.InvalidParameter):
        client.token("")

"""QuotaExceeded, without the daemon: a Unix socket server in the test refuses every connection
as tokend does for a per-uid connection limit (its error as the only message, then the end of the
connection). The client must raise that error, not report a lost connection, whether the refusal
closed the connection before the call was sent (the send fails with EPIPE) or after (ECONNRESET)."""

from __future__ import annotations

import asyncio
import select
import socket
import threading

import pytest

import tokend
from tokend import _aio, _client

REFUSAL = b'{"error":"io.tokend.TokenProvider.QuotaExceeded","parameters":{"quota":"connections_per_uid","limit":128}}\0'


class RefusingServer:
    """Accepts each connection, writes ``REFUSAL`` and closes it. ``wait_for_call``: only once the
    client's call is there (left unread, so the close resets the connection)."""

    def __init__(self, path: str, wait_for_call: bool = False) -> None:
        self.path = path
        self.wait_for_call = wait_for_call
        self.refused = 0
        self._changed = threading.Condition()
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(path)
        self._listener.listen(8)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            try:
                peer, _ = self._listener.accept()
            except OSError:
                return
            with peer:
                if self.wait_for_call:
                    select.select([peer], [], [], 5)
                peer.sendall(REFUSAL)
            with self._changed:
                self.refused += 1
                self._changed.notify_all()

    def wait_refused(self, count: int) -> bool:
        """Waits until ``count`` connections were refused and closed."""
        with self._changed:
            return self._changed.wait_for(lambda: self.refused >= count, 5)

    def close(self) -> None:
        self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        self._thread.join(5)


@pytest.fixture
def server(tmp_path):
    refusing = RefusingServer(str(tmp_path / "full.sock"))
    yield refusing
    refusing.close()


@pytest.fixture
def resetting_server(tmp_path):
    refusing = RefusingServer(str(tmp_path / "reset.sock"), wait_for_call=True)
    yield refusing
    refusing.close()


def check(error: tokend.QuotaExceeded) -> None:
    assert type(error) is tokend.QuotaExceeded
    assert isinstance(error, tokend.TokendError) and not isinstance(error, tokend.DaemonUnavailable)
    assert error.error_name == "io.tokend.TokenProvider.QuotaExceeded"
    assert error.quota == "connections_per_uid" and error.limit == 128 and error.user is None
    assert "the quota connections_per_uid (128) is reached" in str(error)


def test_a_refused_connection_is_quota_exceeded(server):
    client = tokend.Client(server.path, timeout=5)
    for _ in range(3):  # whichever of the send and the close comes first
        with pytest.raises(tokend.QuotaExceeded) as caught:
            client.token("alice")
        check(caught.value)
    with pytest.raises(tokend.QuotaExceeded) as caught:
        next(iter(client.watch("alice")))
    check(caught.value)
    client.close()


def test_quota_exceeded_when_the_send_fails_after_the_close(server, monkeypatch):
    send = _client._Connection.send
    sends = []

    def send_after_the_close(connection, *arguments):
        sends.append(1)
        assert server.wait_refused(len(sends))
        send(connection, *arguments)

    monkeypatch.setattr(_client._Connection, "send", send_after_the_close)
    client = tokend.Client(server.path, timeout=5)
    with pytest.raises(tokend.QuotaExceeded) as caught:
        client.token("alice")
    check(caught.value)
    assert server.refused == 1  # not sent again on a fresh connection
    with pytest.raises(tokend.QuotaExceeded) as caught:
        next(iter(client.watch("alice")))
    check(caught.value)


def test_quota_exceeded_when_the_close_resets_the_call(resetting_server):
    with pytest.raises(tokend.QuotaExceeded) as caught:
        tokend.Client(resetting_server.path, timeout=5).token("alice")
    check(caught.value)


async def _refused_calls(path: str) -> list[BaseException]:
    client = tokend.AsyncClient(path, timeout=5)
    errors: list[BaseException] = []
    for _ in range(3):
        with pytest.raises(tokend.QuotaExceeded) as caught:
            await client.token("alice")
        errors.append(caught.value)
    with pytest.raises(tokend.QuotaExceeded) as caught:
        async for _ in client.watch("alice"):
            pass
    errors.append(caught.value)
    await client.aclose()
    return errors


def test_async_quota_exceeded(server, resetting_server):
    for path in (server.path, resetting_server.path):
        for error in asyncio.run(asyncio.wait_for(_refused_calls(path), 20)):
            check(error)


def test_async_quota_exceeded_when_the_send_fails_after_the_close(server, monkeypatch):
    send = _aio._AsyncConnection.send
    sends = []

    async def send_after_the_close(connection, data):
        sends.append(1)
        assert await asyncio.get_running_loop().run_in_executor(None, server.wait_refused, len(sends))
        await send(connection, data)

    monkeypatch.setattr(_aio._AsyncConnection, "send", send_after_the_close)
    for error in asyncio.run(asyncio.wait_for(_refused_calls(server.path), 20)):
        check(error)
    assert server.refused == 4


def test_quota_exceeded_message_and_attributes():
    from tokend._errors import error_from_reply

    error = error_from_reply(
        "io.tokend.TokenProvider.QuotaExceeded",
        {"quota": "credentials_per_uid", "limit": 256, "userIdentifier": "bob"},
        "io.tokend.TokenProvider.AddCredential",
        {"userIdentifier": "bob", "accessToken": "SECRET"},
    )
    assert type(error) is tokend.QuotaExceeded
    assert (error.quota, error.limit, error.user, error.user_identifier) == ("credentials_per_uid", 256, "bob", "bob")
    assert str(error) == "tokend refused io.tokend.TokenProvider.AddCredential: the quota credentials_per_uid (256) is reached"
    assert "QuotaExceeded" in tokend.__all__

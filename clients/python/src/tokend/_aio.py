"""The asyncio client: the same calls as ``Client``, without blocking the event loop."""

from __future__ import annotations

import asyncio
import socket as _socket
from collections.abc import Iterable, Mapping
from typing import Any

from ._common import (
    AsyncClosing,
    Call,
    ClientBase,
    Lost,
    Seconds,
    WatchBase,
    add_parameters,
    dpop_parameters,
    raise_waiting_error,
    response_arguments,
    token_parameters,
    user_identifier,
    user_parameters,
)
from ._errors import DaemonTimeoutError
from ._types import Credentials, DPoPProof, Status
from ._wire import DEFAULT_TIMEOUT, MAX_MESSAGE_BYTES, connect_error, too_large_error

__all__ = ["AsyncClient", "AsyncWatch"]


#: How long a connection whose send failed is read for a reply the daemon had already sent (the
#: peer is gone, so its data and the end of the stream are there at once).
_WAITING_REPLY_SECONDS = 1.0


class _AsyncConnection:
    def __init__(
        self, path: str, sock: _socket.socket, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        self.path = path
        self.sock = sock
        self.reader = reader
        self.writer = writer
        self.loop = asyncio.get_running_loop()

    @classmethod
    async def open(cls, path: str, method: str) -> _AsyncConnection:
        # The socket is made here (not by open_unix_connection) so that send() can use it.
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        try:
            sock.setblocking(False)
            # A Unix socket connects at once or not at all. One whose accept queue is full (a burst
            # of clients, or another user's flood) refuses with EAGAIN, which sock_connect would
            # take for a connect in progress: try again, backing off from 1 ms to 50 ms, until the
            # call's timeout cancels this.
            backoff = 0.001
            while True:
                try:
                    sock.connect(path)
                    break
                except BlockingIOError:
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, 0.05)
            # The limit bounds one message (readuntil), as MAX_MESSAGE_BYTES does for Client.
            reader, writer = await asyncio.open_unix_connection(sock=sock, limit=MAX_MESSAGE_BYTES)
        except OSError as error:
            sock.close()
            raise connect_error(path, error, method) from None
        except BaseException:
            sock.close()
            raise
        return cls(path, sock, reader, writer)

    async def send(self, data: bytes) -> None:
        if self.writer.is_closing():
            raise Lost("closed")
        try:
            sent = 0
            if self.writer.transport.get_write_buffer_size() == 0:
                # Straight to the (non-blocking) socket while the transport has nothing queued:
                # a transport whose write fails closes the socket at once, and a reply the daemon
                # sent before it closed the connection (a refused connection's QuotaExceededError)
                # would be lost unread. A failure here leaves the transport reading it.
                try:
                    sent = self.sock.send(data)
                except BlockingIOError:
                    pass
            if sent < len(data):
                self.writer.write(data[sent:])
                await self.writer.drain()
        except OSError as error:  # EPIPE, ECONNRESET
            raise Lost(error.strerror or "closed") from None

    async def waiting(self) -> bytes | None:
        """A whole message the daemon already sent (for a send that failed); None when none comes."""
        try:
            message = await asyncio.wait_for(self.reader.readuntil(b"\0"), _WAITING_REPLY_SECONDS)
        except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError):
            return None
        return message[:-1]

    async def receive(self, method: str) -> bytes:
        try:
            message = await self.reader.readuntil(b"\0")
        except asyncio.IncompleteReadError:
            raise Lost("closed by tokend") from None
        except asyncio.LimitOverrunError:
            raise too_large_error(method) from None
        except OSError as error:  # ECONNRESET
            raise Lost(error.strerror or "closed") from None
        return message[:-1]

    def is_stale(self) -> bool:
        """Whether the daemon closed this idle connection, or the event loop changed."""
        try:
            current = asyncio.get_running_loop()
        except RuntimeError:
            return True
        return current is not self.loop or self.writer.is_closing() or self.reader.at_eof()

    def close(self) -> None:
        try:
            self.writer.close()
        except RuntimeError:  # its event loop is closed: so is the socket
            pass


class AsyncClient(ClientBase, AsyncClosing):
    """The asyncio twin of ``Client``: ``await client.token(user)``,
    ``async for credentials in client.watch(user)``.

    One connection per client, reused by every call; concurrent calls from several tasks wait for
    each other (an ``asyncio.Lock``). Every call is bounded by ``timeout`` seconds. A client may be
    used from one event loop at a time; moving to another loop opens a new connection.
    """

    _name = "AsyncClient"
    _connection: _AsyncConnection | None

    def __init__(self, socket: str | None = None, timeout: Seconds = DEFAULT_TIMEOUT) -> None:
        super().__init__(socket, timeout)
        self._lock: asyncio.Lock | None = None
        self._lock_loop: asyncio.AbstractEventLoop | None = None

    async def aclose(self) -> None:
        """Closes the connection; a later call opens a new one."""
        self._drop()

    # --- typed calls -------------------------------------------------------------------

    async def token(
        self,
        user: str,
        min_valid: Seconds = 0,
        rejected: str | None = None,
        *,
        scope: str | None = None,
        resource: str | None = None,
    ) -> Credentials:
        """An access token for ``user`` valid for at least ``min_valid`` seconds, narrowed to
        ``scope`` and/or ``resource`` when given (see ``Client.token``)."""
        reply = await self.call("ProvideTokenReplacement", token_parameters(user, min_valid, rejected, scope, resource))
        return Credentials.from_wire(reply.get("credentials"))

    async def dpop_proof(
        self, user: str, method: str, url: str, *, nonce: str | None = None, min_valid: Seconds = 0
    ) -> DPoPProof:
        """A DPoP proof for one request with the DPoP-bound token of ``user`` (see ``Client.dpop_proof``)."""
        reply = await self.call("ProvideDPoPProof", dpop_parameters(user, method, url, nonce, min_valid))
        return DPoPProof.from_wire(reply)

    async def status(self, user: str | None = None) -> Status:
        """The daemon's status and the credentials this caller may see (or only ``user``'s)."""
        if user is not None:
            return Status.from_wire(await self.call("Status", user_parameters(user)))
        return Status.from_replies(await self._call_with_timeout("Status", {}, more=True))

    async def add_credential(
        self,
        user: str,
        provider: str,
        access_token: str,
        refresh_token: str | None = None,
        token_type: str | None = None,
        expires_in: int | None = None,
        scope: str | None = None,
        readers: Iterable[str] | None = None,
        replace: bool = False,
    ) -> None:
        await self.call(
            "AddCredential",
            add_parameters(user, provider, access_token, refresh_token, token_type, expires_in, scope, readers, replace),
        )

    async def add_token_response(
        self,
        user: str,
        provider: str,
        response: Mapping[str, Any],
        readers: Iterable[str] | None = None,
        replace: bool = False,
    ) -> None:
        await self.add_credential(user, provider, readers=readers, replace=replace, **response_arguments(response))

    async def remove_credential(self, user: str) -> None:
        await self.call("RemoveCredential", user_parameters(user))

    def watch(self, user: str, idle_timeout: Seconds | None = None) -> AsyncWatch:
        """``async for credentials in client.watch(user)``: see ``AsyncWatch``."""
        return AsyncWatch(self, user_identifier(user), idle_timeout)

    # --- raw calls ---------------------------------------------------------------------

    async def call(self, method: str, parameters: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Sends one call and returns its reply's parameters (see ``Client.call``)."""
        return (await self._call_with_timeout(method, parameters))[0]

    async def _call_with_timeout(
        self, method: str, parameters: Mapping[str, Any] | None, more: bool = False
    ) -> list[dict[str, Any]]:
        call = Call(self.socket_path, method, parameters, more)
        try:
            return await asyncio.wait_for(self._call(call), self.timeout)
        except TimeoutError:
            raise DaemonTimeoutError(
                "tokend at %s did not answer %s within %gs" % (self.socket_path, call.method, self.timeout),
                method=call.method,
            ) from None

    async def _call(self, call: Call) -> list[dict[str, Any]]:
        async with self._current_lock():
            while True:
                connection, reused = await self._connect(call.method)
                with call.attempt(reused, self._drop):
                    try:
                        await connection.send(call.data)
                    except Lost as lost:
                        # A refused connection: the daemon wrote its error and closed it.
                        call.send_failed(lost, await connection.waiting())
                    call.sent()
                    while not call.done:
                        # Cancelled (the timeout) or too large: a reply is still due on this
                        # connection, so it can carry no further call (the attempt drops it).
                        call.take(await connection.receive(call.method))
                    return call.replies

    def _current_lock(self) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        if self._lock is None or self._lock_loop is not loop:
            # Created inside the loop that uses it (Python 3.9 binds a Lock to a loop).
            self._lock = asyncio.Lock()
            self._lock_loop = loop
        return self._lock

    async def _connect(self, method: str) -> tuple[_AsyncConnection, bool]:
        connection = self._idle_connection()
        if connection is not None:
            return connection, True
        self._connection = await _AsyncConnection.open(self.socket_path, method)
        return self._connection, False


class AsyncWatch(WatchBase, AsyncClosing):
    """``async for credentials in client.watch(user)``: the current credentials at once, then one
    item per new token, on a connection of its own. Same rules as ``Watch``: the first reply
    within the client's timeout, later ones within ``idle_timeout`` if given; the stream ends by
    raising ``UnknownUserError`` / ``ReauthenticationRequiredError`` / ``DaemonUnavailableError``; ``aclose()``
    (or leaving ``async with``) ends it and closes the connection.
    """

    _name = "AsyncWatch"
    _connection: _AsyncConnection | None

    def __init__(self, client: AsyncClient, user: str, idle_timeout: Seconds | None = None) -> None:
        super().__init__(client, user, idle_timeout)

    def __aiter__(self) -> AsyncWatch:
        return self

    async def __anext__(self) -> Credentials:
        if self._finished:
            raise StopAsyncIteration
        first = not self._started
        timeout = self._client.timeout if first else self._idle_timeout
        with self._ending(StopAsyncIteration):
            try:
                raw = await asyncio.wait_for(self._next_message(first), timeout)
            except TimeoutError:
                raise DaemonTimeoutError(
                    "tokend at %s sent no credentials of %r within %gs" % (self._client.socket_path, self._user, timeout or 0),
                    method=self._method,
                ) from None
            return self._take(raw)

    async def _next_message(self, first: bool) -> bytes:
        if first:
            self._started = True
            connection = self._connection = await _AsyncConnection.open(self._client.socket_path, self._method)
            try:
                await connection.send(self._message())
            except Lost as lost:
                raise_waiting_error(lost, await connection.waiting(), self._method, self._parameters)
        current: _AsyncConnection = self._open_connection()
        return await current.receive(self._method)

    async def aclose(self) -> None:
        """Ends the stream and closes its connection."""
        self._finish()

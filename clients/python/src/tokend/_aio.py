"""The asyncio client: the same calls as ``Client``, without blocking the event loop."""

from __future__ import annotations

import asyncio
from typing import Any, Dict, Iterable, List, Mapping, Optional

from ._client import (
    IDEMPOTENT_METHODS,
    Seconds,
    _add_parameters,
    _positive_seconds,
    _response_arguments,
    _token_parameters,
    _user,
)
from ._errors import ProtocolError, Timeout, TokendError
from ._types import Credentials, Status
from ._wire import (
    DEFAULT_TIMEOUT,
    MAX_MESSAGE_BYTES,
    connect_error,
    decode_reply,
    encode_call,
    lost_error,
    method_name,
    socket_path,
    too_large_error,
)

__all__ = ["AsyncClient", "AsyncWatch"]


class _Lost(Exception):
    def __init__(self, detail: str = "") -> None:
        super().__init__(detail)
        self.detail = detail


class _AsyncConnection:
    def __init__(self, path: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.path = path
        self.reader = reader
        self.writer = writer
        self.loop = asyncio.get_running_loop()

    @classmethod
    async def open(cls, path: str, method: str) -> "_AsyncConnection":
        try:
            # The limit bounds one message (readuntil), as MAX_MESSAGE_BYTES does for Client.
            reader, writer = await asyncio.open_unix_connection(path, limit=MAX_MESSAGE_BYTES)
        except OSError as error:
            raise connect_error(path, error, method) from None
        return cls(path, reader, writer)

    async def send(self, data: bytes) -> None:
        if self.writer.is_closing():
            raise _Lost("closed")
        try:
            self.writer.write(data)
            await self.writer.drain()
        except OSError as error:  # EPIPE, ECONNRESET
            raise _Lost(error.strerror or "closed") from None

    async def receive(self, method: str) -> bytes:
        try:
            message = await self.reader.readuntil(b"\0")
        except asyncio.IncompleteReadError:
            raise _Lost("closed by tokend") from None
        except asyncio.LimitOverrunError:
            raise too_large_error(method) from None
        except OSError as error:  # ECONNRESET
            raise _Lost(error.strerror or "closed") from None
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


class AsyncClient:
    """The asyncio twin of ``Client``: ``await client.token(user)``,
    ``async for credentials in client.watch(user)``.

    One connection per client, reused by every call; concurrent calls from several tasks wait for
    each other (an ``asyncio.Lock``). Every call is bounded by ``timeout`` seconds. A client may be
    used from one event loop at a time; moving to another loop opens a new connection.
    """

    def __init__(self, socket: Optional[str] = None, timeout: Seconds = DEFAULT_TIMEOUT) -> None:
        self.socket_path = socket_path(socket)
        self.timeout = _positive_seconds(timeout, "timeout")
        self._connection: Optional[_AsyncConnection] = None
        self._lock: Optional[asyncio.Lock] = None
        self._lock_loop: Optional[asyncio.AbstractEventLoop] = None

    def __repr__(self) -> str:
        return "AsyncClient(socket=%r, timeout=%g)" % (self.socket_path, self.timeout)

    async def aclose(self) -> None:
        """Closes the connection; a later call opens a new one."""
        self._drop()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.aclose()

    # --- typed calls -------------------------------------------------------------------

    async def token(self, user: str, min_valid: Seconds = 0, rejected: Optional[str] = None) -> Credentials:
        """An access token for ``user`` valid for at least ``min_valid`` seconds (see ``Client.token``)."""
        reply = await self.call("ProvideTokenReplacement", _token_parameters(user, min_valid, rejected))
        return Credentials.from_wire(reply.get("credentials"))

    async def status(self, user: Optional[str] = None) -> Status:
        """The daemon's status and the credentials this caller may see (or only ``user``'s)."""
        if user is not None:
            return Status.from_wire(await self.call("Status", {"userIdentifier": _user(user)}))
        return Status.from_replies(await self._call_with_timeout("Status", {}, more=True))

    async def add_credential(
        self,
        user: str,
        provider: str,
        access_token: str,
        refresh_token: Optional[str] = None,
        token_type: Optional[str] = None,
        expires_in: Optional[int] = None,
        scope: Optional[str] = None,
        readers: Optional[Iterable[str]] = None,
        replace: bool = False,
    ) -> None:
        await self.call(
            "AddCredential",
            _add_parameters(user, provider, access_token, refresh_token, token_type, expires_in, scope, readers, replace),
        )

    async def add_token_response(
        self,
        user: str,
        provider: str,
        response: Mapping[str, Any],
        readers: Optional[Iterable[str]] = None,
        replace: bool = False,
    ) -> None:
        await self.add_credential(user, provider, readers=readers, replace=replace, **_response_arguments(response))

    async def remove_credential(self, user: str) -> None:
        await self.call("RemoveCredential", {"userIdentifier": _user(user)})

    def watch(self, user: str, idle_timeout: Optional[Seconds] = None) -> "AsyncWatch":
        """``async for credentials in client.watch(user)``: see ``AsyncWatch``."""
        return AsyncWatch(self, _user(user), idle_timeout)

    # --- raw calls ---------------------------------------------------------------------

    async def call(self, method: str, parameters: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
        """Sends one call and returns its reply's parameters (see ``Client.call``)."""
        return (await self._call_with_timeout(method, parameters))[0]

    async def _call_with_timeout(
        self, method: str, parameters: Optional[Mapping[str, Any]], more: bool = False
    ) -> List[Dict[str, Any]]:
        method = method_name(method)
        parameters = dict(parameters or {})
        data = encode_call(method, parameters, more=more)
        try:
            return await asyncio.wait_for(self._call(method, parameters, data, more), self.timeout)
        except asyncio.TimeoutError:
            raise Timeout(
                "tokend at %s did not answer %s within %gs" % (self.socket_path, method, self.timeout), method=method
            ) from None

    async def _call(self, method: str, parameters: Dict[str, Any], data: bytes, more: bool) -> List[Dict[str, Any]]:
        async with self._current_lock():
            attempt = 0
            while True:
                attempt += 1
                connection, reused = await self._connect(method)
                try:
                    await connection.send(data)
                except _Lost as lost:
                    self._drop()
                    if attempt == 1:
                        continue
                    raise lost_error(self.socket_path, method, lost.detail) from None
                except BaseException:
                    self._drop()
                    raise
                replies: List[Dict[str, Any]] = []
                lost_detail = ""
                while True:
                    try:
                        raw = await connection.receive(method)
                    except _Lost as lost:
                        lost_detail = lost.detail
                        self._drop()
                        break
                    except BaseException:
                        # Cancelled (the timeout) or too large: a reply is still due on this
                        # connection, so it can carry no further call.
                        self._drop()
                        raise
                    try:
                        reply, continues = decode_reply(raw, method, parameters)
                    except TokendError as error:
                        if error.error_name is None:  # malformed, not an error reply
                            self._drop()
                        raise
                    replies.append(reply)
                    if not continues:
                        return replies
                    if not more:
                        self._drop()
                        raise ProtocolError("tokend answered %s with a stream" % method, method=method)
                if attempt == 1 and reused and not replies and method in IDEMPOTENT_METHODS:
                    continue
                raise lost_error(self.socket_path, method, lost_detail) from None

    def _current_lock(self) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        if self._lock is None or self._lock_loop is not loop:
            # Created inside the loop that uses it (Python 3.9 binds a Lock to a loop).
            self._lock = asyncio.Lock()
            self._lock_loop = loop
        return self._lock

    async def _connect(self, method: str):
        connection = self._connection
        if connection is not None and not connection.is_stale():
            return connection, True
        self._drop()
        connection = await _AsyncConnection.open(self.socket_path, method)
        self._connection = connection
        return connection, False

    def _drop(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()


class AsyncWatch:
    """``async for credentials in client.watch(user)``: the current credentials at once, then one
    item per new token, on a connection of its own. Same rules as ``Watch``: the first reply
    within the client's timeout, later ones within ``idle_timeout`` if given; the stream ends by
    raising ``UnknownUser`` / ``ReauthenticationRequired`` / ``DaemonUnavailable``; ``aclose()``
    (or leaving ``async with``) ends it and closes the connection.
    """

    def __init__(self, client: AsyncClient, user: str, idle_timeout: Optional[Seconds] = None) -> None:
        self._client = client
        self._user = user
        self._idle_timeout = None if idle_timeout is None else _positive_seconds(idle_timeout, "idle_timeout")
        self._method = method_name("Watch")
        self._parameters = {"userIdentifier": user}
        self._connection: Optional[_AsyncConnection] = None
        self._started = False
        self._finished = False

    def __repr__(self) -> str:
        return "AsyncWatch(user=%r, socket=%r)" % (self._user, self._client.socket_path)

    def __aiter__(self) -> "AsyncWatch":
        return self

    async def __anext__(self) -> Credentials:
        if self._finished:
            raise StopAsyncIteration
        first = not self._started
        timeout = self._client.timeout if first else self._idle_timeout
        try:
            try:
                raw = await asyncio.wait_for(self._next_message(first), timeout)
            except asyncio.TimeoutError:
                raise Timeout(
                    "tokend at %s sent no credentials of %r within %gs" % (self._client.socket_path, self._user, timeout or 0),
                    method=self._method,
                ) from None
            reply, continues = decode_reply(raw, self._method, self._parameters)
            credentials = Credentials.from_wire(reply.get("credentials"))
        except _Lost as lost:
            closed_here = self._finished
            self._finish()
            if closed_here:
                raise StopAsyncIteration from None
            raise lost_error(self._client.socket_path, self._method, lost.detail) from None
        except BaseException:
            self._finish()
            raise
        if not continues:
            self._finish()
        return credentials

    async def _next_message(self, first: bool) -> bytes:
        if first:
            self._started = True
            self._connection = await _AsyncConnection.open(self._client.socket_path, self._method)
            await self._connection.send(encode_call(self._method, self._parameters, more=True))
        connection = self._connection
        if connection is None:
            raise _Lost("closed")
        return await connection.receive(self._method)

    async def aclose(self) -> None:
        """Ends the stream and closes its connection."""
        self._finish()

    def _finish(self) -> None:
        self._finished = True
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()

    async def __aenter__(self) -> "AsyncWatch":
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.aclose()

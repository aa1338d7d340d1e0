"""The blocking client."""

from __future__ import annotations

import datetime as _dt
import math
import select
import socket as _socket
import threading
import time
from typing import Any, Dict, Iterable, List, Mapping, Optional, Union

from ._errors import (
    InvalidParameter,
    ProtocolError,
    Timeout,
    TokendError,
)
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

__all__ = ["Client", "Watch"]

Seconds = Union[int, float, _dt.timedelta]

#: Calls that change nothing in the daemon, so sending one again after a connection died before
#: its reply is harmless. (Writes are never sent twice: they may have been committed.)
IDEMPOTENT_METHODS = frozenset(
    [
        "io.tokend.TokenProvider.ProvideTokenReplacement",
        "io.tokend.TokenProvider.Status",
        "org.varlink.service.GetInfo",
        "org.varlink.service.GetInterfaceDescription",
    ]
)


class _Lost(Exception):
    """The connection was closed or reset by the daemon."""

    def __init__(self, detail: str = "") -> None:
        super().__init__(detail)
        self.detail = detail


class _Connection:
    """One blocking connection to the daemon with its receive buffer."""

    def __init__(self, path: str, deadline: float, method: str) -> None:
        self.path = path
        self.buffer = bytearray()
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        try:
            sock.settimeout(_remaining(deadline))
            sock.connect(path)
        except _socket.timeout:
            sock.close()
            raise Timeout(
                "tokend at %s did not accept the connection in time for %s" % (path, method), method=method
            ) from None
        except OSError as error:
            sock.close()
            raise connect_error(path, error, method) from None
        self.sock: Optional[_socket.socket] = sock

    def send(self, data: bytes, deadline: float, method: str) -> None:
        sock = self._socket()
        try:
            sock.settimeout(_remaining(deadline))
            sock.sendall(data)
        except _socket.timeout:
            raise Timeout("tokend at %s did not take the call to %s in time" % (self.path, method), method=method) from None
        except OSError as error:  # EPIPE, ECONNRESET, or closed meanwhile (EBADF)
            raise _Lost(error.strerror or "closed") from None

    def receive(self, deadline: Optional[float], method: str, timeout: Optional[float]) -> bytes:
        """One message, without its NUL. ``deadline`` None waits as long as it takes."""
        while True:
            end = self.buffer.find(b"\0")
            if end >= 0:
                message = bytes(self.buffer[:end])
                del self.buffer[: end + 1]
                return message
            if len(self.buffer) > MAX_MESSAGE_BYTES:
                raise too_large_error(method)
            sock = self._socket()
            try:
                sock.settimeout(None if deadline is None else _remaining(deadline))
                chunk = sock.recv(65536)
            except _socket.timeout:
                raise Timeout(
                    "tokend at %s did not answer %s within %gs" % (self.path, method, timeout or 0), method=method
                ) from None
            except OSError as error:  # ECONNRESET, or closed meanwhile (EBADF)
                raise _Lost(error.strerror or "closed") from None
            if not chunk:
                raise _Lost("closed by tokend")
            self.buffer.extend(chunk)

    def is_stale(self) -> bool:
        """Whether the daemon closed this idle connection (or sent something unasked)."""
        sock = self.sock
        if sock is None:
            return True
        if self.buffer:
            return True
        try:
            # An idle connection has nothing to read: readable means closed (end of file) or
            # something sent unasked; either way it cannot carry the next call.
            readable, _, _ = select.select([sock], [], [], 0)
        except (OSError, ValueError):
            return True
        return bool(readable)

    def close(self) -> None:
        sock, self.sock = self.sock, None
        if sock is None:
            return
        try:
            sock.shutdown(_socket.SHUT_RDWR)
        except OSError:
            pass
        sock.close()

    def _socket(self) -> _socket.socket:
        if self.sock is None:
            raise _Lost("closed")
        return self.sock


class Client:
    """A client of tokend: asks the daemon for fresh access tokens over its Unix socket.

    The client connects on its first call and reuses that connection for every call, from any
    number of threads (calls are serialised by a lock). When the daemon closed the connection
    since the last call (it restarted), the next call reconnects once; a call that may have
    reached the daemon is only sent again when it changes nothing (``token``, ``status``).
    Every call waits at most ``timeout`` seconds for its reply, then raises ``Timeout``.

    Args:
        socket: the daemon's socket; ``None`` means ``$TOKEND_SOCKET``, else
            ``/run/tokend/io.tokend``.
        timeout: how long one call may take, in seconds (default 10).
    """

    def __init__(self, socket: Optional[str] = None, timeout: Seconds = DEFAULT_TIMEOUT) -> None:
        self.socket_path = socket_path(socket)
        self.timeout = _positive_seconds(timeout, "timeout")
        self._lock = threading.Lock()
        self._connection: Optional[_Connection] = None

    def __repr__(self) -> str:
        return "Client(socket=%r, timeout=%g)" % (self.socket_path, self.timeout)

    # --- lifecycle ---------------------------------------------------------------------

    def close(self) -> None:
        """Closes the connection; a later call opens a new one."""
        with self._lock:
            self._drop()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def __del__(self) -> None:
        connection = getattr(self, "_connection", None)
        if connection is not None:
            connection.close()

    # --- typed calls -------------------------------------------------------------------

    def token(self, user: str, min_valid: Seconds = 0, rejected: Optional[str] = None) -> Credentials:
        """An access token for ``user`` that stays valid for at least ``min_valid`` seconds.

        ``rejected`` is the token an API just refused: when it is still the current one, tokend
        refreshes before answering; when it is stale, the current token is the answer.
        """
        parameters = _token_parameters(user, min_valid, rejected)
        reply = self.call("ProvideTokenReplacement", parameters)
        return Credentials.from_wire(reply.get("credentials"))

    def status(self, user: Optional[str] = None) -> Status:
        """The daemon's status and the credentials this caller may see (or only ``user``'s)."""
        if user is not None:
            return Status.from_wire(self.call("Status", {"userIdentifier": _user(user)}))
        # All credentials: with `more`, tokend streams them in batches (no reply grows with
        # their number); the batches are collected here.
        return Status.from_replies(self._call("Status", {}, more=True))

    def add_credential(
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
        """Stores a credential from a token endpoint response (readers default to this uid)."""
        self.call(
            "AddCredential",
            _add_parameters(user, provider, access_token, refresh_token, token_type, expires_in, scope, readers, replace),
        )

    def add_token_response(
        self,
        user: str,
        provider: str,
        response: Mapping[str, Any],
        readers: Optional[Iterable[str]] = None,
        replace: bool = False,
    ) -> None:
        """Stores a credential from a token endpoint's JSON response (a dict)."""
        self.add_credential(user, provider, readers=readers, replace=replace, **_response_arguments(response))

    def remove_credential(self, user: str) -> None:
        """Deletes the credential of ``user``."""
        self.call("RemoveCredential", {"userIdentifier": _user(user)})

    def watch(self, user: str, idle_timeout: Optional[Seconds] = None) -> "Watch":
        """The credentials of ``user`` now, then each time its token changes (see ``Watch``)."""
        return Watch(self, _user(user), idle_timeout)

    # --- raw calls ---------------------------------------------------------------------

    def call(self, method: str, parameters: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
        """Sends one call and returns its reply's parameters; raises the typed error otherwise.

        ``method`` without an interface means ``io.tokend.TokenProvider.<method>``. ``None``
        parameters are left out.
        """
        return self._call(method, parameters)[0]

    def _call(self, method: str, parameters: Optional[Mapping[str, Any]], more: bool = False) -> List[Dict[str, Any]]:
        """All replies of one call: one, or with ``more`` all of the stream, within the timeout."""
        method = method_name(method)
        parameters = dict(parameters or {})
        data = encode_call(method, parameters, more=more)
        deadline = time.monotonic() + self.timeout
        # Waiting for another thread's call counts toward this call's deadline.
        if not self._lock.acquire(timeout=self.timeout):
            raise Timeout(
                "tokend at %s: %s waited %gs for other calls on this client" % (self.socket_path, method, self.timeout),
                method=method,
            )
        try:
            return self._call_locked(method, parameters, data, deadline, more)
        finally:
            self._lock.release()

    def _call_locked(
        self, method: str, parameters: Dict[str, Any], data: bytes, deadline: float, more: bool
    ) -> List[Dict[str, Any]]:
        attempt = 0
        while True:
            attempt += 1
            connection, reused = self._connect(deadline, method)
            try:
                connection.send(data, deadline, method)
            except _Lost as lost:
                # Never reached the daemon: safe to send once more on a fresh connection.
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
                    raw = connection.receive(deadline, method, self.timeout)
                except _Lost as lost:
                    lost_detail = lost.detail
                    self._drop()
                    break
                except BaseException:
                    # A timeout (or an interrupt) leaves a reply in flight: the connection's
                    # replies no longer match its calls.
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
            # The connection was lost before the (last) reply.
            if attempt == 1 and reused and not replies and method in IDEMPOTENT_METHODS:
                continue
            raise lost_error(self.socket_path, method, lost_detail) from None

    # --- internals ---------------------------------------------------------------------

    def _connect(self, deadline: float, method: str):
        connection = self._connection
        if connection is not None and not connection.is_stale():
            return connection, True
        self._drop()
        connection = _Connection(self.socket_path, deadline, method)
        self._connection = connection
        return connection, False

    def _drop(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()


class Watch:
    """An iterator over the credentials of one user: the current ones at once, then one item
    each time tokend replaces the token.

    It has a connection of its own (a ``Watch`` call holds its connection), opened on the first
    ``next()``. The first reply must come within the client's timeout; later ones may take as long
    as the token lives, or at most ``idle_timeout`` seconds when one is given (then ``Timeout``).
    The stream ends by raising the typed error tokend ends it with: ``UnknownUser`` when the
    credential is removed, ``ReauthenticationRequired`` when it needs a new login;
    ``DaemonUnavailable`` when the daemon goes away. After that, or after ``close()`` (also from
    another thread, or by leaving a ``with`` block), iteration stops.
    """

    def __init__(self, client: Client, user: str, idle_timeout: Optional[Seconds] = None) -> None:
        self._client = client
        self._user = user
        self._idle_timeout = None if idle_timeout is None else _positive_seconds(idle_timeout, "idle_timeout")
        self._method = method_name("Watch")
        self._parameters = {"userIdentifier": user}
        self._connection: Optional[_Connection] = None
        self._started = False
        self._finished = False
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return "Watch(user=%r, socket=%r)" % (self._user, self._client.socket_path)

    def __iter__(self) -> "Watch":
        return self

    def __next__(self) -> Credentials:
        with self._lock:
            if self._finished:
                raise StopIteration
            try:
                deadline: Optional[float]
                timeout: Optional[float]
                if not self._started:
                    self._started = True
                    timeout = self._client.timeout
                    start_deadline = time.monotonic() + timeout
                    deadline = start_deadline
                    self._connection = _Connection(self._client.socket_path, start_deadline, self._method)
                    self._connection.send(
                        encode_call(self._method, self._parameters, more=True), start_deadline, self._method
                    )
                else:
                    timeout = self._idle_timeout
                    deadline = None if timeout is None else time.monotonic() + timeout
                connection = self._connection
                if connection is None:
                    raise _Lost("closed")
                raw = connection.receive(deadline, self._method, timeout)
                reply, continues = decode_reply(raw, self._method, self._parameters)
                credentials = Credentials.from_wire(reply.get("credentials"))
            except _Lost as lost:
                closed_here = self._finished
                self._finish()
                if closed_here:
                    raise StopIteration from None
                raise lost_error(self._client.socket_path, self._method, lost.detail) from None
            except BaseException:
                self._finish()
                raise
            if not continues:
                self._finish()
            return credentials

    def close(self) -> None:
        """Ends the stream and closes its connection (safe from any thread, more than once)."""
        self._finished = True
        connection = self._connection
        if connection is not None:
            connection.close()  # a next() blocked in recv() wakes up and stops

    def _finish(self) -> None:
        self._finished = True
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()

    def __enter__(self) -> "Watch":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def __del__(self) -> None:
        connection = getattr(self, "_connection", None)
        if connection is not None:
            connection.close()


# --- parameter helpers shared with the asyncio client ---------------------------------------


def _remaining(deadline: float) -> float:
    remaining = deadline - time.monotonic()
    # settimeout(0) would mean non-blocking; a tiny positive value times out at once instead.
    return remaining if remaining > 0 else 1e-6


def _positive_seconds(value: Seconds, name: str) -> float:
    if isinstance(value, _dt.timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 or math.isinf(value):
        raise ValueError("%s must be a positive number of seconds" % name)
    return float(value)


def _whole_seconds(value: Seconds, name: str) -> int:
    if isinstance(value, _dt.timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or math.isnan(value) or math.isinf(value):
        raise ValueError("%s must be a number of seconds >= 0" % name)
    return int(math.ceil(value))


def _user(user: Any) -> str:
    if not isinstance(user, str) or not user:
        raise InvalidParameter("the user identifier must be a non-empty string", parameters={"parameter": "userIdentifier"})
    return user


def _token_parameters(user: str, min_valid: Seconds, rejected: Optional[str]) -> Dict[str, Any]:
    if rejected is not None and not isinstance(rejected, str):
        raise InvalidParameter("rejected must be the token (a string) an API refused", parameters={"parameter": "rejectedToken"})
    minimum = _whole_seconds(min_valid, "min_valid")
    return {
        "userIdentifier": _user(user),
        "minValidSeconds": minimum if minimum else None,
        "rejectedToken": rejected or None,
    }


def _add_parameters(
    user: str,
    provider: str,
    access_token: str,
    refresh_token: Optional[str],
    token_type: Optional[str],
    expires_in: Optional[int],
    scope: Optional[str],
    readers: Optional[Iterable[str]],
    replace: bool,
) -> Dict[str, Any]:
    if isinstance(readers, str):
        raise InvalidParameter("readers must be a list such as ['uid:1000']", parameters={"parameter": "readers"})
    return {
        "userIdentifier": _user(user),
        "provider": provider,
        "accessToken": access_token,
        "refreshToken": refresh_token,
        "tokenType": token_type,
        "expiresIn": int(expires_in) if expires_in is not None else None,
        "scope": scope,
        "readers": list(readers) if readers is not None else None,
        "replace": True if replace else None,
    }


def _response_arguments(response: Mapping[str, Any]) -> Dict[str, Any]:
    return {
        "access_token": response.get("access_token"),
        "refresh_token": response.get("refresh_token"),
        "token_type": response.get("token_type"),
        "expires_in": response.get("expires_in"),
        "scope": response.get("scope"),
    }


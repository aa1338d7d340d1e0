"""The blocking client."""

from __future__ import annotations

import select
import socket as _socket
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any

from ._common import (
    Call,
    ClientBase,
    Closing,
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

__all__ = ["Client", "Watch"]


class _Connection:
    """One blocking connection to the daemon with its receive buffer."""

    def __init__(self, path: str, deadline: float, method: str) -> None:
        self.path = path
        self.buffer = bytearray()
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        try:
            _connect_when_room(sock, path, deadline)
        except TimeoutError:
            sock.close()
            raise DaemonTimeoutError(
                "tokend at %s did not accept the connection in time for %s" % (path, method), method=method
            ) from None
        except OSError as error:
            sock.close()
            raise connect_error(path, error, method) from None
        self.sock: _socket.socket | None = sock

    def send(self, data: bytes, deadline: float, method: str) -> None:
        sock = self._socket()
        try:
            sock.settimeout(_remaining(deadline))
            sock.sendall(data)
        except TimeoutError:
            raise DaemonTimeoutError("tokend at %s did not take the call to %s in time" % (self.path, method), method=method) from None
        except OSError as error:  # EPIPE, ECONNRESET, or closed meanwhile (EBADF)
            raise Lost(error.strerror or "closed") from None

    def waiting(self) -> bytes | None:
        """A whole message the daemon already sent, read without waiting (for a send that failed:
        a peer that closed has nothing more on its way); None when there is none."""
        sock = self.sock
        if sock is not None:
            try:
                sock.setblocking(False)
                while b"\0" not in self.buffer and len(self.buffer) <= MAX_MESSAGE_BYTES:
                    chunk = sock.recv(65536)
                    if not chunk:
                        break
                    self.buffer.extend(chunk)
            except OSError:  # nothing (more) to read, ECONNRESET after the data, closed meanwhile
                pass
        end = self.buffer.find(b"\0")
        if end < 0:
            return None
        message = bytes(self.buffer[:end])
        del self.buffer[: end + 1]
        return message

    def receive(self, deadline: float | None, method: str, timeout: float | None) -> bytes:
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
            except TimeoutError:
                raise DaemonTimeoutError(
                    "tokend at %s did not answer %s within %gs" % (self.path, method, timeout or 0), method=method
                ) from None
            except OSError as error:  # ECONNRESET, or closed meanwhile (EBADF)
                raise Lost(error.strerror or "closed") from None
            if not chunk:
                raise Lost("closed by tokend")
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
            raise Lost("closed")
        return self.sock


class Client(ClientBase, Closing):
    """A client of tokend: asks the daemon for fresh access tokens over its Unix socket.

    The client connects on its first call and reuses that connection for every call, from any
    number of threads (calls are serialised by a lock). When the daemon closed the connection
    since the last call (it restarted), the next call reconnects once; a call that may have
    reached the daemon is only sent again when it changes nothing (``token``, ``dpop_proof``,
    ``status``).
    Every call waits at most ``timeout`` seconds for its reply, then raises ``DaemonTimeoutError``.

    Args:
        socket: the daemon's socket; ``None`` means ``$TOKEND_SOCKET``, else
            ``/run/tokend/io.tokend``.
        timeout: how long one call may take, in seconds (default 10).
    """

    _connection: _Connection | None

    def __init__(self, socket: str | None = None, timeout: Seconds = DEFAULT_TIMEOUT) -> None:
        super().__init__(socket, timeout)
        self._lock = threading.Lock()

    # --- lifecycle ---------------------------------------------------------------------

    def close(self) -> None:
        """Closes the connection; a later call opens a new one."""
        with self._lock:
            self._drop()

    # --- typed calls -------------------------------------------------------------------

    def token(
        self,
        user: str,
        min_valid: Seconds = 0,
        rejected: str | None = None,
        *,
        scope: str | None = None,
        resource: str | None = None,
    ) -> Credentials:
        """An access token for ``user`` that stays valid for at least ``min_valid`` seconds.

        ``rejected`` is the token an API just refused: when it is still the current one, tokend
        refreshes before answering; when it is stale, the current token is the answer.

        ``scope`` (space-separated values, a subset of the credential's scope) and ``resource``
        (the absolute URI of the API the token is for, RFC 8707) ask for a narrowed token
        instead of the credential's own: tokend gets it from the provider and keeps it fresh
        apart from the credential's token (``rejected`` is then compared with the narrowed
        token); ``scope`` of the answer is the narrowed scope. The provider must have
        ``narrowed_tokens = true``. Raises ``InvalidCredentialError`` for a scope wider than the
        credential's or a provider without narrowed tokens, ``RefreshFailedError`` when the provider
        refuses or does not narrow, ``InvalidParameterError`` (``parameter`` ``scope`` or
        ``resource``) for a malformed one.
        """
        parameters = token_parameters(user, min_valid, rejected, scope, resource)
        reply = self.call("ProvideTokenReplacement", parameters)
        return Credentials.from_wire(reply.get("credentials"))

    def dpop_proof(
        self, user: str, method: str, url: str, *, nonce: str | None = None, min_valid: Seconds = 0
    ) -> DPoPProof:
        """A DPoP proof (RFC 9449) for one HTTP request with the DPoP-bound token of ``user``,
        signed by tokend with the credential's key (which never leaves the daemon).

        ``method`` is the request's method (``"GET"``, ...), ``url`` its absolute ``https`` URL
        (``http`` only to a loopback host); the proof leaves out its query and fragment.
        ``nonce`` is the resource server's ``DPoP-Nonce``, when its answer demanded one. The
        token stays valid for at least ``min_valid`` seconds, as for ``token``. Send the request
        with the proof's ``headers``, and ask again for the next request: proofs are not reused.

        Raises ``InvalidCredentialError`` when the credential's tokens are not DPoP-bound,
        ``InvalidParameterError`` (``parameter`` ``httpMethod``, ``httpUri`` or ``nonce``) for a
        method, URL or nonce tokend refuses, and otherwise what ``token`` raises.
        """
        parameters = dpop_parameters(user, method, url, nonce, min_valid)
        return DPoPProof.from_wire(self.call("ProvideDPoPProof", parameters))

    def status(self, user: str | None = None) -> Status:
        """The daemon's status and the credentials this caller may see (or only ``user``'s)."""
        if user is not None:
            return Status.from_wire(self.call("Status", user_parameters(user)))
        # All credentials: with `more`, tokend streams them in batches (no reply grows with
        # their number); the batches are collected here.
        return Status.from_replies(self._call("Status", {}, more=True))

    def add_credential(
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
        """Stores a credential from a token endpoint response (readers default to this uid)."""
        self.call(
            "AddCredential",
            add_parameters(user, provider, access_token, refresh_token, token_type, expires_in, scope, readers, replace),
        )

    def add_token_response(
        self,
        user: str,
        provider: str,
        response: Mapping[str, Any],
        readers: Iterable[str] | None = None,
        replace: bool = False,
    ) -> None:
        """Stores a credential from a token endpoint's JSON response (a dict)."""
        self.add_credential(user, provider, readers=readers, replace=replace, **response_arguments(response))

    def remove_credential(self, user: str) -> None:
        """Deletes the credential of ``user``."""
        self.call("RemoveCredential", user_parameters(user))

    def watch(self, user: str, idle_timeout: Seconds | None = None) -> Watch:
        """The credentials of ``user`` now, then each time its token changes (see ``Watch``)."""
        return Watch(self, user_identifier(user), idle_timeout)

    # --- raw calls ---------------------------------------------------------------------

    def call(self, method: str, parameters: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Sends one call and returns its reply's parameters; raises the typed error otherwise.

        ``method`` without an interface means ``io.tokend.TokenProvider.<method>``. ``None``
        parameters are left out.
        """
        return self._call(method, parameters)[0]

    def _call(self, method: str, parameters: Mapping[str, Any] | None, more: bool = False) -> list[dict[str, Any]]:
        """All replies of one call: one, or with ``more`` all of the stream, within the timeout."""
        call = Call(self.socket_path, method, parameters, more)
        deadline = time.monotonic() + self.timeout
        # Waiting for another thread's call counts toward this call's deadline.
        if not self._lock.acquire(timeout=self.timeout):
            raise DaemonTimeoutError(
                "tokend at %s: %s waited %gs for other calls on this client" % (self.socket_path, call.method, self.timeout),
                method=call.method,
            )
        try:
            return self._call_locked(call, deadline)
        finally:
            self._lock.release()

    def _call_locked(self, call: Call, deadline: float) -> list[dict[str, Any]]:
        while True:
            connection, reused = self._connect(deadline, call.method)
            with call.attempt(reused, self._drop):
                try:
                    connection.send(call.data, deadline, call.method)
                except Lost as lost:
                    # A refused connection: the daemon wrote its error and closed it.
                    call.send_failed(lost, connection.waiting())
                call.sent()
                while not call.done:
                    call.take(connection.receive(deadline, call.method, self.timeout))
                return call.replies

    def _connect(self, deadline: float, method: str) -> tuple[_Connection, bool]:
        connection = self._idle_connection()
        if connection is not None:
            return connection, True
        self._connection = _Connection(self.socket_path, deadline, method)
        return self._connection, False


class Watch(WatchBase, Closing):
    """An iterator over the credentials of one user: the current ones at once, then one item
    each time tokend replaces the token.

    It has a connection of its own (a ``Watch`` call holds its connection), opened on the first
    ``next()``. The first reply must come within the client's timeout; later ones may take as long
    as the token lives, or at most ``idle_timeout`` seconds when one is given (then ``DaemonTimeoutError``).
    The stream ends by raising the typed error tokend ends it with: ``UnknownUserError`` when the
    credential is removed, ``ReauthenticationRequiredError`` when it needs a new login;
    ``DaemonUnavailableError`` when the daemon goes away. After that, or after ``close()`` (also from
    another thread, or by leaving a ``with`` block), iteration stops.
    """

    _connection: _Connection | None

    def __init__(self, client: Client, user: str, idle_timeout: Seconds | None = None) -> None:
        super().__init__(client, user, idle_timeout)
        self._lock = threading.Lock()

    def __iter__(self) -> Watch:
        return self

    def __next__(self) -> Credentials:
        with self._lock:
            if self._finished:
                raise StopIteration
            with self._ending(StopIteration):
                deadline: float | None
                timeout: float | None
                if not self._started:
                    self._started = True
                    timeout = self._client.timeout
                    deadline = start_deadline = time.monotonic() + timeout
                    connection = self._connection = _Connection(self._client.socket_path, start_deadline, self._method)
                    try:
                        connection.send(self._message(), start_deadline, self._method)
                    except Lost as lost:
                        raise_waiting_error(lost, connection.waiting(), self._method, self._parameters)
                else:
                    timeout = self._idle_timeout
                    deadline = None if timeout is None else time.monotonic() + timeout
                return self._take(self._open_connection().receive(deadline, self._method, timeout))

    def close(self) -> None:
        """Ends the stream and closes its connection (safe from any thread, more than once)."""
        self._finished = True
        connection = self._connection
        if connection is not None:
            connection.close()  # a next() blocked in recv() wakes up and stops


def _connect_when_room(sock: _socket.socket, path: str, deadline: float) -> None:
    """Connects ``sock`` to ``path``. A Unix socket whose accept queue is full (a burst of clients,
    or another user's flood) refuses at once with EAGAIN instead of waiting as TCP does: try again,
    backing off from 1 ms to 50 ms, until the deadline (then TimeoutError)."""
    backoff = 0.001
    while True:
        sock.settimeout(_remaining(deadline))
        try:
            sock.connect(path)
            return
        except BlockingIOError:
            if deadline - time.monotonic() <= backoff:
                raise TimeoutError from None
            time.sleep(backoff)
            backoff = min(backoff * 2, 0.05)


def _remaining(deadline: float) -> float:
    remaining = deadline - time.monotonic()
    # settimeout(0) would mean non-blocking; a tiny positive value times out at once instead.
    return remaining if remaining > 0 else 1e-6

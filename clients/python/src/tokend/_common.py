"""What ``Client`` and ``AsyncClient`` share, without I/O: the parameters of the typed calls, the
course of one call (its replies, when its connection must go, when it may be sent once more),
and the course of a watch. Each client keeps only its own connecting, sending and receiving."""

from __future__ import annotations

import datetime as _dt
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal, NoReturn, TypeVar

from ._errors import InvalidParameterError, ProtocolError, QuotaExceededError, TokendError
from ._readers import ReaderError, parse_reader
from ._types import Credentials
from ._wire import decode_reply, encode_call, lost_error, method_name, socket_path

Seconds = int | float | _dt.timedelta

#: Calls that change nothing in the daemon, so sending one again after a connection died before
#: its reply is harmless. (Writes are never sent twice: they may have been committed.)
IDEMPOTENT_METHODS = frozenset(
    [
        "io.tokend.TokenProvider.ProvideTokenReplacement",
        "io.tokend.TokenProvider.ProvideDPoPProof",
        "io.tokend.TokenProvider.Status",
        "org.varlink.service.GetInfo",
        "org.varlink.service.GetInterfaceDescription",
    ]
)

_Self = TypeVar("_Self")


class Lost(Exception):
    """The connection was closed or reset by the daemon."""

    def __init__(self, detail: str = "") -> None:
        super().__init__(detail)
        self.detail = detail


class Call:
    """One call to tokend: its message, its replies, and what each failure means.

    A client runs it as ``with call.attempt(reused, drop):`` around sending ``data`` and
    ``take``-ing replies until ``done``. Leaving the block by an exception drops the connection,
    unless the exception is an error reply (the connection stays in step); a lost connection
    ends the block quietly when the call may go once more (then ``done`` is false), and raises
    ``DaemonUnavailableError`` otherwise.
    """

    def __init__(self, path: str, method: str, parameters: Mapping[str, Any] | None, more: bool = False) -> None:
        self.socket_path = path
        self.method = method_name(method)
        self.parameters = dict(parameters or {})
        self.more = more
        self.data = encode_call(self.method, self.parameters, more=more)
        self.replies: list[dict[str, Any]] = []
        self.done = False
        self._attempts = 0
        self._reused = False
        self._sent = False
        self._drop: Callable[[], None] = lambda: None

    def attempt(self, reused: bool, drop: Callable[[], None]) -> Call:
        """A new attempt on a connection: an idle one (``reused``) or a new one; ``drop`` closes it."""
        self._attempts += 1
        self._reused = reused
        self._sent = False
        self._drop = drop
        self.replies = []
        return self

    def sent(self) -> None:
        """The message left: from now on it may have reached the daemon."""
        self._sent = True

    def send_failed(self, lost: Lost, waiting: bytes | None) -> NoReturn:
        """The message could not be sent (``lost``); ``waiting`` is a whole message the daemon had
        already sent on the connection, if any. An error reply waiting there is the answer (see
        ``raise_waiting_error``): it is raised and the broken connection dropped. Otherwise
        ``lost`` is raised, and the attempt decides."""
        try:
            raise_waiting_error(lost, waiting, self.method, self.parameters)
        except TokendError:
            self._drop()
            raise

    def take(self, raw: bytes) -> None:
        """One reply (``done`` after the last); raises the typed error of an error reply."""
        reply, continues = decode_reply(raw, self.method, self.parameters)
        self.replies.append(reply)
        if not continues:
            self.done = True
        elif not self.more:
            raise ProtocolError("tokend answered %s with a stream" % self.method, method=self.method)

    def __enter__(self) -> Call:
        return self

    def __exit__(self, kind: Any, error: BaseException | None, traceback: Any) -> bool:
        if error is None:
            return False
        if isinstance(error, TokendError) and error.error_name is not None:
            if isinstance(error, QuotaExceededError):
                # Maybe the refusal of the connection itself, which the daemon then closes: the
                # next call opens a new one (it could not tell in time that this one is closed).
                self._drop()
            return False
        # A timeout (or an interrupt, a cancellation) leaves a reply in flight, a malformed reply
        # leaves the stream unreadable: the connection's replies no longer match its calls.
        self._drop()
        if not isinstance(error, Lost):
            return False
        if self._attempts == 1 and self._may_send_again():
            return True
        raise lost_error(self.socket_path, self.method, error.detail) from None

    def _may_send_again(self) -> bool:
        # A message that never left never reached the daemon. One that did may only go again on
        # a fresh connection when the idle one was closed by the daemon (it restarted) before any
        # reply, and when the call changes nothing.
        return not self._sent or (self._reused and not self.replies and self.method in IDEMPOTENT_METHODS)


def raise_waiting_error(lost: Lost, waiting: bytes | None, method: str, parameters: Mapping[str, Any]) -> NoReturn:
    """Raises the typed error of ``waiting`` when it is an error reply, else ``lost``.

    For a send that failed: a daemon that refuses a connection (``QuotaExceededError`` for a per-uid
    connection limit) writes that error as the connection's only message and closes it, maybe
    before the call arrived. The error it left is the answer, not the broken connection.
    """
    if waiting is not None:
        try:
            decode_reply(waiting, method, parameters)
        except TokendError as error:
            if error.error_name is not None:
                raise error from None
    raise lost


class ClientBase:
    """The connection bookkeeping of a client; subclasses open and use the connection."""

    _name = "Client"

    def __init__(self, socket: str | None, timeout: Seconds) -> None:
        self.socket_path = socket_path(socket)
        self.timeout = positive_seconds(timeout, "timeout")
        self._connection: Any = None

    def __repr__(self) -> str:
        return "%s(socket=%r, timeout=%g)" % (self._name, self.socket_path, self.timeout)

    def _idle_connection(self) -> Any:
        """The connection of the last call while it can carry the next; else None (dropped)."""
        connection = self._connection
        if connection is not None and not connection.is_stale():
            return connection
        self._drop()
        return None

    def _drop(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()


class WatchBase:
    """The stream of a watch, whatever reads it: the call, the replies, and how it ends."""

    _name = "Watch"

    def __init__(self, client: ClientBase, user: str, idle_timeout: Seconds | None = None) -> None:
        self._client = client
        self._user = user
        self._idle_timeout = None if idle_timeout is None else positive_seconds(idle_timeout, "idle_timeout")
        self._method = method_name("Watch")
        self._parameters = {"userIdentifier": user}
        self._connection: Any = None
        self._started = False
        self._finished = False

    def __repr__(self) -> str:
        return "%s(user=%r, socket=%r)" % (self._name, self._user, self._client.socket_path)

    def _message(self) -> bytes:
        return encode_call(self._method, self._parameters, more=True)

    def _open_connection(self) -> Any:
        connection = self._connection
        if connection is None:
            raise Lost("closed")
        return connection

    def _take(self, raw: bytes) -> Credentials:
        """The credentials of one reply; the last reply finishes the stream."""
        reply, continues = decode_reply(raw, self._method, self._parameters)
        credentials = Credentials.from_wire(reply.get("credentials"))
        if not continues:
            self._finish()
        return credentials

    def _ending(self, stop: type[Exception]) -> _Ending:
        """Around reading the next item: any failure finishes the stream; a connection lost after
        ``close()`` ends the iteration with ``stop``, one lost otherwise is ``DaemonUnavailableError``."""
        return _Ending(self, stop)

    def _finish(self) -> None:
        self._finished = True
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()


class _Ending:
    def __init__(self, watch: WatchBase, stop: type[Exception]) -> None:
        self.watch = watch
        self.stop = stop

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, error: BaseException | None, traceback: Any) -> Literal[False]:
        if error is None:
            return False
        watch = self.watch
        closed_here = watch._finished
        watch._finish()
        if isinstance(error, Lost):
            if closed_here:
                raise self.stop from None
            raise lost_error(watch._client.socket_path, watch._method, error.detail) from None
        return False


class Closing:
    """``with`` closes; so does garbage collection, for the connection in ``_connection``."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self: _Self) -> _Self:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def __del__(self) -> None:
        connection = getattr(self, "_connection", None)
        if connection is not None:
            connection.close()


class AsyncClosing:
    """``async with`` closes with ``aclose()``."""

    async def aclose(self) -> None:
        raise NotImplementedError

    async def __aenter__(self: _Self) -> _Self:
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.aclose()


# --- parameters ------------------------------------------------------------------------------


def positive_seconds(value: Seconds, name: str) -> float:
    if isinstance(value, _dt.timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 or math.isinf(value):
        raise ValueError("%s must be a positive number of seconds" % name)
    return float(value)


def whole_seconds(value: Seconds, name: str) -> int:
    if isinstance(value, _dt.timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or math.isnan(value) or math.isinf(value):
        raise ValueError("%s must be a number of seconds >= 0" % name)
    return math.ceil(value)


def user_identifier(user: Any) -> str:
    if not isinstance(user, str) or not user:
        raise InvalidParameterError("the user identifier must be a non-empty string", parameters={"parameter": "userIdentifier"})
    return user


def user_parameters(user: Any) -> dict[str, Any]:
    return {"userIdentifier": user_identifier(user)}


def token_parameters(
    user: str,
    min_valid: Seconds,
    rejected: str | None,
    scope: str | None = None,
    resource: str | None = None,
) -> dict[str, Any]:
    if rejected is not None and not isinstance(rejected, str):
        raise InvalidParameterError("rejected must be the token (a string) an API refused", parameters={"parameter": "rejectedToken"})
    minimum = whole_seconds(min_valid, "min_valid")
    parameters = {
        "userIdentifier": user_identifier(user),
        "minValidSeconds": minimum if minimum else None,
        "rejectedToken": rejected or None,
    }
    parameters.update(narrowing_parameters(scope, resource))
    return parameters


def narrowing_parameters(scope: str | None, resource: str | None) -> dict[str, Any]:
    """The ``scope`` and ``resource`` of a narrowed token, as sent (``None``: not asked for).
    tokend checks what they hold; here only that each is a non-empty string when given."""
    if scope is not None and (not isinstance(scope, str) or not scope):
        raise InvalidParameterError(
            "scope must be space-separated scope values (a non-empty string), such as 'read'",
            parameters={"parameter": "scope"},
        )
    if resource is not None and (not isinstance(resource, str) or not resource):
        raise InvalidParameterError(
            "resource must be the absolute URI (a non-empty string) of the API the token is for",
            parameters={"parameter": "resource"},
        )
    return {"scope": scope, "resource": resource}


def narrowing_repr(scope: str | None, resource: str | None) -> str:
    """``", scope='read', resource='https://...'"`` for those given, for the repr of an auth."""
    return "".join(", %s=%r" % (name, value) for name, value in (("scope", scope), ("resource", resource)) if value is not None)


def dpop_parameters(user: str, method: str, url: str, nonce: str | None, min_valid: Seconds) -> dict[str, Any]:
    if not isinstance(method, str) or not method:
        raise InvalidParameterError("method must be the request's HTTP method, such as 'GET'", parameters={"parameter": "httpMethod"})
    if not isinstance(url, str) or not url:
        raise InvalidParameterError("url must be the request's absolute URL (a string)", parameters={"parameter": "httpUri"})
    if nonce is not None and (not isinstance(nonce, str) or not nonce):
        raise InvalidParameterError("nonce must be the DPoP-Nonce (a string) the server sent", parameters={"parameter": "nonce"})
    minimum = whole_seconds(min_valid, "min_valid")
    return {
        "userIdentifier": user_identifier(user),
        "httpMethod": method,
        "httpUri": url,
        "nonce": nonce,
        "minValidSeconds": minimum if minimum else None,
    }


def add_parameters(
    user: str,
    provider: str,
    access_token: str,
    refresh_token: str | None,
    token_type: str | None,
    expires_in: int | None,
    scope: str | None,
    readers: Iterable[str] | None,
    replace: bool,
) -> dict[str, Any]:
    if isinstance(readers, str):
        raise InvalidParameterError("readers must be a list such as ['uid:1000']", parameters={"parameter": "readers"})
    canonical = None
    if readers is not None:
        canonical = []
        for reader in readers:
            try:
                canonical.append(parse_reader(reader))
            except ReaderError as error:
                raise InvalidParameterError("readers: %s" % error, parameters={"parameter": "readers"}) from None
    return {
        "userIdentifier": user_identifier(user),
        "provider": provider,
        "accessToken": access_token,
        "refreshToken": refresh_token,
        "tokenType": token_type,
        "expiresIn": int(expires_in) if expires_in is not None else None,
        "scope": scope,
        "readers": canonical,
        "replace": True if replace else None,
    }


def response_arguments(response: Mapping[str, Any]) -> dict[str, Any]:
    """The keyword arguments of ``add_credential`` from a token endpoint's JSON response."""
    return {
        "access_token": response.get("access_token"),
        "refresh_token": response.get("refresh_token"),
        "token_type": response.get("token_type"),
        "expires_in": response.get("expires_in"),
        "scope": response.get("scope"),
    }

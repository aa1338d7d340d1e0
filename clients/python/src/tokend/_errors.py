"""The exceptions of the tokend client, and the mapping from Varlink error replies to them.

No message, ``repr`` or attribute of these exceptions ever contains a token: strings the daemon
sent back are stripped of control characters, shortened, and scrubbed of every secret the call
carried (``accessToken``, ``refreshToken``, ``rejectedToken``).
"""

from __future__ import annotations

import datetime as _dt
import time as _time
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = [
    "CredentialExists",
    "CredentialExistsError",
    "DaemonTimeoutError",
    "DaemonUnavailable",
    "DaemonUnavailableError",
    "ExpectedMore",
    "ExpectedMoreError",
    "InvalidCredential",
    "InvalidCredentialError",
    "InvalidParameter",
    "InvalidParameterError",
    "KeyRotationUnavailable",
    "KeyRotationUnavailableError",
    "LoginFailed",
    "LoginFailedError",
    "MethodNotFound",
    "MethodNotFoundError",
    "PermissionDenied",
    "PermissionDeniedError",
    "ProtocolError",
    "QuotaExceeded",
    "QuotaExceededError",
    "ReauthenticationRequired",
    "ReauthenticationRequiredError",
    "RefreshFailed",
    "RefreshFailedError",
    "StorageFailed",
    "StorageFailedError",
    "Timeout",
    "TokendError",
    "UnknownLogin",
    "UnknownLoginError",
    "UnknownProvider",
    "UnknownProviderError",
    # The names of earlier releases, kept as aliases of the classes above.
    "UnknownUser",
    "UnknownUserError",
]

INTERFACE = "io.tokend.TokenProvider"
REDACTED = "<redacted>"
SECRET_PARAMETERS = ("accessToken", "refreshToken", "rejectedToken")
_MAX_TEXT = 300


def _text_property(key: str) -> property:
    """The error's parameter ``key`` when it is a string, else None (as a read-only property)."""

    def read(error: TokendError) -> str | None:
        value = error.parameters.get(key)
        return value if isinstance(value, str) else None

    return property(read, doc="The ``%s`` parameter of the error, when it has one." % key)


class TokendError(Exception):
    """Any failure of a call to tokend.

    Attributes:
        message: a human-readable explanation; never a token.
        error_name: the fully qualified Varlink error name, when the daemon answered with one.
        parameters: the Varlink error's parameters, secrets of the call redacted.
        method: the fully qualified method of the call that failed, when there was one.
    """

    def __init__(
        self,
        message: str,
        *,
        error_name: str | None = None,
        parameters: Mapping[str, Any] | None = None,
        method: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.error_name = error_name
        self.parameters: dict[str, Any] = dict(parameters or {})
        self.method = method

    user_identifier = _text_property("userIdentifier")

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return "%s(%r)" % (type(self).__name__, self.message)

    def __reduce__(self) -> tuple[Any, ...]:  # pickling keeps the keyword arguments
        return (
            _rebuild,
            (type(self), self.message, self.error_name, self.parameters, self.method),
        )


def _rebuild(
    cls: type[TokendError], message: str, error_name: str | None, parameters: dict[str, Any], method: str | None
) -> TokendError:
    error = cls.__new__(cls)
    TokendError.__init__(error, message, error_name=error_name, parameters=parameters, method=method)
    return error


class UnknownUserError(TokendError):
    """tokend has no credential for the user identifier (or it was removed)."""


class PermissionDeniedError(TokendError, PermissionError):
    """The caller may not make this call or read this credential, or may not open the socket.

    Also a ``PermissionError``, so ``except PermissionError`` catches it.
    """


class ReauthenticationRequiredError(TokendError):
    """The login has ended; only a new login (a new credential) helps. ``reason`` says why."""

    reason = _text_property("reason")


class RefreshFailedError(TokendError):
    """No fresh enough token now. ``reason`` says why, ``retry_at`` (UTC) when tokend tries again."""

    reason = _text_property("reason")

    @property
    def retry_at(self) -> _dt.datetime | None:
        return _timestamp(self.parameters.get("retryAt"))


class CredentialExistsError(TokendError):
    """``add_credential`` without ``replace`` for a user that already has a credential."""


class UnknownProviderError(TokendError):
    """The provider named in ``add_credential`` is not configured."""

    provider = _text_property("provider")


class InvalidCredentialError(TokendError):
    """tokend refused the token response given to ``add_credential``, ``dpop_proof`` was asked
    for a credential whose tokens are not DPoP-bound, or ``token`` for a narrowed token the
    credential cannot have (a scope wider than its own, a provider without narrowed tokens)."""

    reason = _text_property("reason")


class StorageFailedError(TokendError):
    """tokend's credential store failed."""

    reason = _text_property("reason")


class KeyRotationUnavailableError(TokendError):
    """``RotateKey`` cannot run (the key is read-only)."""


class LoginFailedError(TokendError):
    """A login produced no credential; ``oauth_error`` is the provider's error code, if any."""

    reason = _text_property("reason")
    oauth_error = _text_property("oauthError")


class UnknownLoginError(TokendError):
    """No login with that id is waiting for this caller."""


class QuotaExceededError(TokendError):
    """A per-uid limit of the daemon refused the call, or the connection itself.

    ``quota`` names the limit: ``connections`` (the daemon is full for non-administrators),
    ``connections_per_uid``, ``credentials_per_uid`` or ``calls_in_flight_per_uid``; ``limit``
    is its value; ``user`` (as ``user_identifier``) the user concerned, when the daemon says.
    """

    quota = _text_property("quota")
    user = _text_property("userIdentifier")

    @property
    def limit(self) -> int | None:
        value = self.parameters.get("limit")
        return value if isinstance(value, int) and not isinstance(value, bool) else None


class ProtocolError(TokendError):
    """The daemon sent something that is not a valid reply, or an error this client does not know."""


class InvalidParameterError(ProtocolError):
    """``org.varlink.service.InvalidParameter``: a parameter was missing, mistyped or invalid."""

    parameter = _text_property("parameter")


class MethodNotFoundError(ProtocolError):
    """The daemon does not know the method or interface."""


class ExpectedMoreError(ProtocolError):
    """The method must be called with ``more`` (a stream)."""


class DaemonUnavailableError(TokendError):
    """tokend is not running at the socket, refused the connection, or the connection was lost.

    ``socket_path`` is the socket that was tried; the message names it too.
    """

    def __init__(self, message: str, *, socket_path: str | None = None, method: str | None = None) -> None:
        super().__init__(message, method=method)
        self.socket_path = socket_path

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_unavailable, (type(self), self.message, self.socket_path, self.method))


def _rebuild_unavailable(
    cls: type[DaemonUnavailableError], message: str, socket_path: str | None, method: str | None
) -> DaemonUnavailableError:
    return cls(message, socket_path=socket_path, method=method)


class DaemonTimeoutError(TokendError, TimeoutError):
    """tokend did not answer within the call's timeout. The connection is closed afterwards.

    Also a ``TimeoutError``, so ``except TimeoutError`` catches it.
    """


# The names of earlier releases (without the ``Error`` suffix), kept so existing code runs.
UnknownUser = UnknownUserError
PermissionDenied = PermissionDeniedError
ReauthenticationRequired = ReauthenticationRequiredError
RefreshFailed = RefreshFailedError
CredentialExists = CredentialExistsError
UnknownProvider = UnknownProviderError
InvalidCredential = InvalidCredentialError
StorageFailed = StorageFailedError
KeyRotationUnavailable = KeyRotationUnavailableError
LoginFailed = LoginFailedError
UnknownLogin = UnknownLoginError
QuotaExceeded = QuotaExceededError
InvalidParameter = InvalidParameterError
MethodNotFound = MethodNotFoundError
ExpectedMore = ExpectedMoreError
DaemonUnavailable = DaemonUnavailableError
Timeout = DaemonTimeoutError


_BY_NAME: dict[str, type[TokendError]] = {
    INTERFACE + ".UnknownUser": UnknownUserError,
    INTERFACE + ".PermissionDenied": PermissionDeniedError,
    INTERFACE + ".ReauthenticationRequired": ReauthenticationRequiredError,
    INTERFACE + ".RefreshFailed": RefreshFailedError,
    INTERFACE + ".CredentialExists": CredentialExistsError,
    INTERFACE + ".UnknownProvider": UnknownProviderError,
    INTERFACE + ".InvalidCredential": InvalidCredentialError,
    INTERFACE + ".StorageFailed": StorageFailedError,
    INTERFACE + ".KeyRotationUnavailable": KeyRotationUnavailableError,
    INTERFACE + ".LoginFailed": LoginFailedError,
    INTERFACE + ".UnknownLogin": UnknownLoginError,
    INTERFACE + ".QuotaExceeded": QuotaExceededError,
    # The daemon could not read our message: a client/daemon mismatch.
    INTERFACE + ".InvalidMessage": ProtocolError,
    "org.varlink.service.InvalidParameter": InvalidParameterError,
    "org.varlink.service.MethodNotFound": MethodNotFoundError,
    "org.varlink.service.MethodNotImplemented": MethodNotFoundError,
    "org.varlink.service.InterfaceNotFound": MethodNotFoundError,
    "org.varlink.service.ExpectedMore": ExpectedMoreError,
    "org.varlink.service.PermissionDenied": PermissionDeniedError,
}


def exception_class(error_name: str) -> type[TokendError]:
    """The exception class for a Varlink error name; ``ProtocolError`` for names not known."""
    return _BY_NAME.get(error_name, ProtocolError)


def secrets_of(parameters: Mapping[str, Any]) -> list[str]:
    """The values of a call's parameters that are secrets."""
    return [
        value
        for value in (parameters.get(key) for key in SECRET_PARAMETERS)
        if isinstance(value, str) and value
    ]


def display(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every secret replaced, control characters dropped, at most 300 characters."""
    for secret in secrets:
        if secret and secret in text:
            text = text.replace(secret, REDACTED)
    text = "".join(ch for ch in text if not (ord(ch) < 0x20 or 0x7F <= ord(ch) < 0xA0))
    if len(text) > _MAX_TEXT:
        text = text[:_MAX_TEXT] + "..."
    return text


def redact(value: Any, secrets: list[str]) -> Any:
    """``value`` with every string that contains a secret replaced, at any depth."""
    if not secrets:
        return value
    if isinstance(value, str):
        return REDACTED if any(secret in value for secret in secrets) else value
    if isinstance(value, list):
        return [redact(item, secrets) for item in value]
    if isinstance(value, dict):
        return {key: redact(item, secrets) for key, item in value.items()}
    return value


def error_from_reply(
    error_name: Any, parameters: Any, method: str, call_parameters: Mapping[str, Any]
) -> TokendError:
    """The exception for a Varlink error reply to a call of ``method`` with ``call_parameters``.

    The call's user identifier fills in a missing one; every secret the call carried is redacted
    from the message and the parameters, whatever the daemon sent back.
    """
    secrets = secrets_of(call_parameters)
    if not isinstance(parameters, dict):
        parameters = {}
    parameters = redact(parameters, secrets)
    name = error_name if isinstance(error_name, str) else repr(error_name)
    cls = exception_class(name)

    def text(key: str) -> str | None:
        value = parameters.get(key)
        return display(value, secrets) if isinstance(value, str) else None

    user = text("userIdentifier")
    if user is None and isinstance(call_parameters.get("userIdentifier"), str):
        user = display(call_parameters["userIdentifier"], secrets)
    user_phrase = "user %r" % user if user is not None else "the user"
    reason = text("reason")
    reason_part = ": " + reason if reason else ""
    shown_method = display(method, secrets)

    if cls is UnknownUserError:
        message = "tokend has no credential for %s" % user_phrase
    elif cls is PermissionDeniedError:
        if user is not None:
            message = "permission denied: tokend does not let this caller use the credential of %s" % user_phrase
        else:
            message = "permission denied: tokend does not let this caller call %s" % shown_method
    elif cls is ReauthenticationRequiredError:
        message = "the login of %s has ended and needs a new login%s" % (user_phrase, reason_part)
    elif cls is RefreshFailedError:
        message = "tokend could not get a fresh enough token for %s%s" % (user_phrase, reason_part)
        retry_at = parameters.get("retryAt")
        if isinstance(retry_at, (int, float)) and not isinstance(retry_at, bool):
            wait = int(retry_at - _time.time())
            message += " (next attempt in %ds)" % wait if wait > 0 else " (next attempt now)"
    elif cls is CredentialExistsError:
        message = "tokend already has a credential for %s" % user_phrase
    elif cls is UnknownProviderError:
        provider = text("provider")
        if provider is None and isinstance(call_parameters.get("provider"), str):
            provider = display(call_parameters["provider"], secrets)
        message = "tokend has no provider named %r" % (provider if provider is not None else "?")
    elif cls is InvalidCredentialError:
        message = "tokend refused the credential%s" % reason_part
    elif cls is StorageFailedError:
        message = "tokend's credential store failed%s" % reason_part
    elif cls is KeyRotationUnavailableError:
        message = "tokend cannot rotate its key%s" % reason_part
    elif cls is LoginFailedError:
        message = "the login of %s failed%s" % (user_phrase, reason_part)
    elif cls is UnknownLoginError:
        message = "tokend has no login in progress with that id for this caller"
    elif cls is QuotaExceededError:
        limit = parameters.get("limit")
        limit_part = " (%d)" % limit if isinstance(limit, int) and not isinstance(limit, bool) else ""
        message = "tokend refused %s: the quota %s%s is reached" % (shown_method, text("quota") or "?", limit_part)
    elif cls is InvalidParameterError:
        message = "tokend refused parameter %r of %s" % (text("parameter") or "?", shown_method)
    elif cls is MethodNotFoundError:
        interface = text("interface")
        if interface is not None:
            message = "tokend does not provide interface %s" % interface
        else:
            message = "tokend does not implement %s" % (text("method") or shown_method)
    elif cls is ExpectedMoreError:
        message = "tokend expects %s to be called with 'more'" % shown_method
    elif name == INTERFACE + ".InvalidMessage":
        message = "tokend could not read the call to %s%s" % (shown_method, reason_part)
    else:
        message = "tokend answered %s with error %s" % (shown_method, display(name, secrets))
    return cls(message, error_name=name, parameters=parameters, method=method)


def _timestamp(value: Any) -> _dt.datetime | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return _dt.datetime.fromtimestamp(value, tz=_dt.UTC)
    except (OverflowError, OSError, ValueError):
        return None

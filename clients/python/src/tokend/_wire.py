"""Varlink framing: one JSON object per message, each followed by a NUL byte."""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Mapping
from typing import Any

from ._errors import (
    DaemonUnavailableError,
    PermissionDeniedError,
    ProtocolError,
    TokendError,
    error_from_reply,
)

INTERFACE = "io.tokend.TokenProvider"
#: The production socket, as for the Swift client and tokenctl.
DEFAULT_SOCKET_PATH = "/run/tokend/io.tokend"
#: The environment variable that overrides ``DEFAULT_SOCKET_PATH``.
SOCKET_ENVIRONMENT_VARIABLE = "TOKEND_SOCKET"
#: The longest reply accepted (as the Swift client: 1 MiB).
MAX_MESSAGE_BYTES = 1 << 20
#: How long a call may wait for its reply, by default (as the Swift client).
DEFAULT_TIMEOUT = 10.0


def socket_path(explicit: str | None = None) -> str:
    """``explicit`` if given, else ``$TOKEND_SOCKET`` when set and not empty, else the default."""
    if explicit:
        return os.fspath(explicit)
    from_environment = os.environ.get(SOCKET_ENVIRONMENT_VARIABLE)
    if from_environment:
        return from_environment
    return DEFAULT_SOCKET_PATH


def method_name(method: str) -> str:
    """``method`` qualified with the tokend interface when it has no interface of its own."""
    return method if "." in method else INTERFACE + "." + method


def encode_call(method: str, parameters: Mapping[str, Any], more: bool = False) -> bytes:
    """One call as it goes on the wire. ``None`` parameters are left out."""
    message: dict[str, Any] = {
        "method": method,
        "parameters": {key: value for key, value in parameters.items() if value is not None},
    }
    if more:
        message["more"] = True
    return json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode("utf-8") + b"\0"


def decode_reply(
    raw: bytes, method: str, call_parameters: Mapping[str, Any]
) -> tuple[dict[str, Any], bool]:
    """The parameters of a reply and whether more replies follow (``continues``).

    Raises the typed ``TokendError`` for an error reply and ``ProtocolError`` for anything that
    is not a Varlink reply. Messages never quote the reply (it may hold a token).
    """
    try:
        reply = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise ProtocolError("tokend sent a reply to %s that is not JSON" % method, method=method) from None
    if not isinstance(reply, dict):
        raise ProtocolError("tokend sent a reply to %s that is not a JSON object" % method, method=method)
    if "error" in reply and reply["error"] is not None:
        raise error_from_reply(reply["error"], reply.get("parameters"), method, call_parameters)
    parameters = reply.get("parameters", {})
    if parameters is None:
        parameters = {}
    if not isinstance(parameters, dict):
        raise ProtocolError("tokend sent a reply to %s whose parameters are not an object" % method, method=method)
    continues = reply.get("continues", False)
    if not isinstance(continues, bool):
        raise ProtocolError("tokend sent a reply to %s whose 'continues' is not a boolean" % method, method=method)
    return parameters, continues


def connect_error(path: str, error: OSError, method: str | None = None) -> TokendError:
    """The exception for a failed ``connect()`` to ``path``."""
    if isinstance(error, FileNotFoundError) or error.errno == errno.ENOENT:
        return DaemonUnavailableError(
            "tokend is not running: no socket at %s (set $%s or pass socket=)"
            % (path, SOCKET_ENVIRONMENT_VARIABLE),
            socket_path=path,
            method=method,
        )
    if isinstance(error, PermissionError) or error.errno in (errno.EACCES, errno.EPERM):
        return PermissionDeniedError(
            "permission denied: this process may not connect to tokend's socket %s" % path,
            method=method,
        )
    if isinstance(error, ConnectionRefusedError) or error.errno == errno.ECONNREFUSED:
        return DaemonUnavailableError(
            "tokend is not running: the socket %s refused the connection" % path,
            socket_path=path,
            method=method,
        )
    return DaemonUnavailableError(
        "cannot connect to tokend at %s: %s" % (path, error.strerror or str(error) or type(error).__name__),
        socket_path=path,
        method=method,
    )


def lost_error(path: str, method: str | None, detail: str = "") -> DaemonUnavailableError:
    """The exception for a connection that tokend closed or reset."""
    text = "the connection to tokend at %s was lost" % path
    if method:
        text += " during %s" % method
    if detail:
        text += " (%s)" % detail
    return DaemonUnavailableError(text, socket_path=path, method=method)


def too_large_error(method: str) -> ProtocolError:
    return ProtocolError(
        "tokend sent a reply to %s larger than %d bytes" % (method, MAX_MESSAGE_BYTES), method=method
    )

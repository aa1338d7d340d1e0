"""A client of tokend, the daemon that keeps OAuth credentials fresh on this host.

    import tokend

    client = tokend.Client()                    # $TOKEND_SOCKET, else /run/tokend/io.tokend
    credentials = client.token("alice", min_valid=60)
    headers = {"Authorization": credentials.authorization_header()}

Standard library only. ``tokend.AsyncClient`` is the asyncio twin; ``tokend.requests`` and
``tokend.httpx`` hold authentication helpers for those HTTP libraries (imported only when used).
"""

from . import _errors
from ._aio import AsyncClient, AsyncWatch
from ._client import Client, Watch
from ._errors import *  # noqa: F403  (the exceptions: the names in _errors.__all__)
from ._readers import ReaderError, parse_reader
from ._types import Credentials, CredentialStatus, DaemonStatus, DPoPProof, QuotaUsage, Status
from ._wire import DEFAULT_SOCKET_PATH, SOCKET_ENVIRONMENT_VARIABLE

#: The one version source of the package (pyproject.toml reads it); the daemon's version.
__version__ = "0.1.0"

__all__ = [
    "DEFAULT_SOCKET_PATH",
    "SOCKET_ENVIRONMENT_VARIABLE",
    "AsyncClient",
    "AsyncWatch",
    "Client",
    "CredentialStatus",
    "Credentials",
    "DPoPProof",
    "DaemonStatus",
    "QuotaUsage",
    "ReaderError",
    "Status",
    "Watch",
    "__version__",
    "parse_reader",
]
__all__ += _errors.__all__

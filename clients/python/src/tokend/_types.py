"""What tokend's replies carry, as frozen dataclasses. Times are timezone-aware UTC datetimes."""

from __future__ import annotations

import dataclasses
import datetime as _dt
from typing import Any, List, Mapping, Optional, Tuple

from ._errors import ProtocolError

__all__ = ["Credentials", "CredentialStatus", "DaemonStatus", "Status"]


@dataclasses.dataclass(frozen=True)
class Credentials:
    """An access token and what a program needs to use it.

    ``repr()`` and ``str()`` never show the token; read ``access_token`` or
    ``authorization_header()`` when you send it.
    """

    user_identifier: str
    access_token: str = dataclasses.field(repr=False)
    token_type: str
    #: When tokend stops serving this token (UTC).
    expires_at: _dt.datetime
    issued_at: Optional[_dt.datetime] = None
    scope: Optional[str] = None

    def authorization_header(self) -> str:
        """The value of an HTTP ``Authorization`` header: ``"<token_type> <access_token>"``.

        The token type is written ``Bearer`` when tokend says ``bearer`` in any case (RFC 6750
        names the scheme ``Bearer``; some providers answer ``bearer``).
        """
        token_type = self.token_type or "Bearer"
        if token_type.lower() == "bearer":
            token_type = "Bearer"
        return "%s %s" % (token_type, self.access_token)

    def expires_in(self, now: Optional[_dt.datetime] = None) -> float:
        """Seconds until ``expires_at`` (negative once it has passed)."""
        now = now or _dt.datetime.now(_dt.timezone.utc)
        return (self.expires_at - now).total_seconds()

    @classmethod
    def from_wire(cls, value: Any) -> "Credentials":
        """Credentials from the ``credentials`` object of a reply; ``ProtocolError`` if malformed."""
        if not isinstance(value, dict):
            raise ProtocolError("tokend's reply has no credentials object")
        return cls(
            user_identifier=_string(value, "userIdentifier", "credentials"),
            access_token=_string(value, "accessToken", "credentials"),
            token_type=_string(value, "tokenType", "credentials"),
            expires_at=_time(value, "expiresAt", "credentials"),
            issued_at=_optional_time(value, "issuedAt", "credentials"),
            scope=_optional_string(value, "scope", "credentials"),
        )


@dataclasses.dataclass(frozen=True)
class CredentialStatus:
    """One credential as ``Status`` reports it: its state, without its tokens."""

    user_identifier: str
    provider: str
    #: valid, refreshing, retrying, reauthentication_required or expired
    state: str
    expires_at: _dt.datetime
    issued_at: _dt.datetime
    session_started_at: _dt.datetime
    refresh_count: int
    readers: Tuple[str, ...]
    enrolled_by_uid: int
    session_ends_at: Optional[_dt.datetime] = None
    next_refresh_at: Optional[_dt.datetime] = None
    last_refresh_at: Optional[_dt.datetime] = None
    last_error: Optional[str] = None
    lease_holder: Optional[str] = None
    lease_expires_at: Optional[_dt.datetime] = None
    shorter_than_margin: Optional[bool] = None

    @classmethod
    def from_wire(cls, value: Any) -> "CredentialStatus":
        where = "credential status"
        if not isinstance(value, dict):
            raise ProtocolError("tokend's reply has a credential status that is not an object")
        readers = value.get("readers")
        if not isinstance(readers, list) or not all(isinstance(r, str) for r in readers):
            raise ProtocolError("tokend's reply has a %s without a readers list" % where)
        shorter = value.get("shorterThanMargin")
        return cls(
            user_identifier=_string(value, "userIdentifier", where),
            provider=_string(value, "provider", where),
            state=_string(value, "state", where),
            expires_at=_time(value, "expiresAt", where),
            issued_at=_time(value, "issuedAt", where),
            session_started_at=_time(value, "sessionStartedAt", where),
            refresh_count=_integer(value, "refreshCount", where),
            readers=tuple(readers),
            enrolled_by_uid=_integer(value, "enrolledByUid", where),
            session_ends_at=_optional_time(value, "sessionEndsAt", where),
            next_refresh_at=_optional_time(value, "nextRefreshAt", where),
            last_refresh_at=_optional_time(value, "lastRefreshAt", where),
            last_error=_optional_string(value, "lastError", where),
            lease_holder=_optional_string(value, "leaseHolder", where),
            lease_expires_at=_optional_time(value, "leaseExpiresAt", where),
            shorter_than_margin=shorter if isinstance(shorter, bool) else None,
        )


@dataclasses.dataclass(frozen=True)
class DaemonStatus:
    """The daemon as a whole."""

    version: str
    started_at: _dt.datetime
    credentials: int
    valid: int
    refreshing: int
    retrying: int
    reauthentication_required: int
    expired: int
    next_refresh_at: Optional[_dt.datetime] = None
    store: Optional[str] = None
    store_problem: Optional[str] = None
    node: Optional[str] = None
    nodes: Optional[Tuple[str, ...]] = None

    @classmethod
    def from_wire(cls, value: Any) -> "DaemonStatus":
        where = "daemon status"
        if not isinstance(value, dict):
            raise ProtocolError("tokend's reply has a daemon status that is not an object")
        nodes = value.get("nodes")
        return cls(
            version=_string(value, "version", where),
            started_at=_time(value, "startedAt", where),
            credentials=_integer(value, "credentials", where),
            valid=_integer(value, "valid", where),
            refreshing=_integer(value, "refreshing", where),
            retrying=_integer(value, "retrying", where),
            reauthentication_required=_integer(value, "reauthenticationRequired", where),
            expired=_integer(value, "expired", where),
            next_refresh_at=_optional_time(value, "nextRefreshAt", where),
            store=_optional_string(value, "store", where),
            store_problem=_optional_string(value, "storeProblem", where),
            node=_optional_string(value, "node", where),
            nodes=tuple(n for n in nodes if isinstance(n, str)) if isinstance(nodes, list) else None,
        )


@dataclasses.dataclass(frozen=True)
class Status:
    """The reply of ``Status``: the daemon (when reported) and the credentials the caller may see."""

    daemon: Optional[DaemonStatus]
    credentials: List[CredentialStatus]

    @classmethod
    def from_wire(cls, parameters: Mapping[str, Any]) -> "Status":
        daemon = parameters.get("daemon")
        credentials = parameters.get("credentials")
        if not isinstance(credentials, list):
            raise ProtocolError("tokend's Status reply has no credentials list")
        return cls(
            daemon=DaemonStatus.from_wire(daemon) if daemon is not None else None,
            credentials=[CredentialStatus.from_wire(item) for item in credentials],
        )


    @classmethod
    def from_replies(cls, replies: List[Mapping[str, Any]]) -> "Status":
        """The replies of ``Status`` called with ``more``: the daemon in the first, credentials
        in batches."""
        if not replies:
            raise ProtocolError("tokend sent no Status reply")
        first = cls.from_wire(replies[0])
        credentials = list(first.credentials)
        for reply in replies[1:]:
            credentials.extend(cls.from_wire(reply).credentials)
        return cls(daemon=first.daemon, credentials=credentials)


def _string(value: Mapping[str, Any], key: str, where: str) -> str:
    item = value.get(key)
    if not isinstance(item, str):
        raise ProtocolError("tokend's reply has a %s without a string %r" % (where, key))
    return item


def _optional_string(value: Mapping[str, Any], key: str, where: str) -> Optional[str]:
    item = value.get(key)
    if item is None:
        return None
    if not isinstance(item, str):
        raise ProtocolError("tokend's reply has a %s whose %r is not a string" % (where, key))
    return item


def _integer(value: Mapping[str, Any], key: str, where: str) -> int:
    item = value.get(key)
    if isinstance(item, bool) or not isinstance(item, int):
        raise ProtocolError("tokend's reply has a %s without an integer %r" % (where, key))
    return item


def _time(value: Mapping[str, Any], key: str, where: str) -> _dt.datetime:
    seconds = _integer(value, key, where)
    try:
        return _dt.datetime.fromtimestamp(seconds, tz=_dt.timezone.utc)
    except (OverflowError, OSError, ValueError):
        raise ProtocolError("tokend's reply has a %s whose %r is out of range" % (where, key)) from None


def _optional_time(value: Mapping[str, Any], key: str, where: str) -> Optional[_dt.datetime]:
    if value.get(key) is None:
        return None
    return _time(value, key, where)

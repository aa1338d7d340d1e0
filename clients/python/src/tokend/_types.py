"""What tokend's replies carry, as frozen dataclasses. Times are timezone-aware UTC datetimes."""

from __future__ import annotations

import dataclasses
import datetime as _dt
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from ._errors import ProtocolError

__all__ = ["CredentialStatus", "Credentials", "DPoPProof", "DaemonStatus", "QuotaUsage", "Status"]

_T = TypeVar("_T")


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
    issued_at: _dt.datetime | None = None
    scope: str | None = None

    def authorization_header(self) -> str:
        """The value of an HTTP ``Authorization`` header: ``"<token_type> <access_token>"``.

        The token type is written ``Bearer`` when tokend says ``bearer`` in any case (RFC 6750
        names the scheme ``Bearer``; some providers answer ``bearer``).
        """
        token_type = self.token_type or "Bearer"
        if token_type.lower() == "bearer":
            token_type = "Bearer"
        return "%s %s" % (token_type, self.access_token)

    def expires_in(self, now: _dt.datetime | None = None) -> float:
        """Seconds until ``expires_at`` (negative once it has passed)."""
        now = now or _dt.datetime.now(_dt.UTC)
        return (self.expires_at - now).total_seconds()

    @classmethod
    def from_wire(cls, value: Any) -> Credentials:
        """Credentials from the ``credentials`` object of a reply; ``ProtocolError`` if malformed."""
        return _from_wire(cls, value, "credentials", "tokend's reply has no credentials object")


@dataclasses.dataclass(frozen=True)
class DPoPProof:
    """A DPoP proof (RFC 9449) for one HTTP request, and the DPoP-bound credentials it goes with.

    Send the request with ``headers``; ask tokend again for the next request (a proof names the
    method and URL it was made for, and has an id of its own). ``repr()`` and ``str()`` never
    show the token or the proof.
    """

    credentials: Credentials
    #: The compact JWS for the ``DPoP`` header.
    proof: str = dataclasses.field(repr=False)

    @property
    def headers(self) -> dict[str, str]:
        """The HTTP headers of the request: ``Authorization: DPoP <access_token>`` and
        ``DPoP: <proof>`` (a new dict each time)."""
        return {"Authorization": "DPoP %s" % self.credentials.access_token, "DPoP": self.proof}

    @classmethod
    def from_wire(cls, parameters: Mapping[str, Any]) -> DPoPProof:
        """The proof of a ``ProvideDPoPProof`` reply's parameters; ``ProtocolError`` if malformed."""
        credentials = Credentials.from_wire(parameters.get("credentials"))
        proof = parameters.get("proof")
        if not isinstance(proof, str) or not proof:
            raise ProtocolError("tokend's ProvideDPoPProof reply has no proof")
        return cls(credentials=credentials, proof=proof)


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
    readers: tuple[str, ...]
    enrolled_by_uid: int
    session_ends_at: _dt.datetime | None = None
    next_refresh_at: _dt.datetime | None = None
    last_refresh_at: _dt.datetime | None = None
    last_error: str | None = None
    lease_holder: str | None = None
    lease_expires_at: _dt.datetime | None = None
    shorter_than_margin: bool | None = None
    #: The access token's type: ``Bearer``, or ``DPoP`` for tokens bound to the credential's key.
    token_type: str | None = None
    #: After when no refresh can keep the credential alive: a new login is needed by then (UTC);
    #: ``None`` when no such end is known.
    relogin_by: _dt.datetime | None = None
    #: Why ``relogin_by``: max_token_age, session_end, refresh_token_expiry or token_expiry.
    relogin_reason: str | None = None

    @classmethod
    def from_wire(cls, value: Any) -> CredentialStatus:
        where = "credential status"
        if isinstance(value, dict):
            _names(value, "readers", where)  # a bad readers list is reported before other fields
        return _from_wire(cls, value, where, "tokend's reply has a credential status that is not an object")


@dataclasses.dataclass(frozen=True)
class QuotaUsage:
    """What the caller's uid holds against its per-uid limits, and the program tokend saw for it.

    Administrators (``administrator`` true) are not limited by them, except by
    ``max_connections``.
    """

    uid: int
    administrator: bool
    connections: int
    max_connections: int
    credentials: int
    max_credentials: int
    calls_in_flight: int
    max_calls_in_flight: int
    #: The calling process's systemd unit, as ``unit:`` readers are checked against it.
    unit: str | None = None
    #: The calling process's executable, as ``exe:`` readers are checked against it.
    executable: str | None = None

    @classmethod
    def from_wire(cls, value: Any) -> QuotaUsage:
        return _from_wire(cls, value, "quota usage", "tokend's reply has a quota usage that is not an object")


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
    next_refresh_at: _dt.datetime | None = None
    store: str | None = None
    store_problem: str | None = None
    node: str | None = None
    nodes: tuple[str, ...] | None = None
    #: What the caller's uid holds against its per-uid limits.
    caller: QuotaUsage | None = None

    @classmethod
    def from_wire(cls, value: Any) -> DaemonStatus:
        return _from_wire(cls, value, "daemon status", "tokend's reply has a daemon status that is not an object")


@dataclasses.dataclass(frozen=True)
class Status:
    """The reply of ``Status``: the daemon (when reported) and the credentials the caller may see."""

    daemon: DaemonStatus | None
    credentials: list[CredentialStatus]

    @classmethod
    def from_wire(cls, parameters: Mapping[str, Any]) -> Status:
        daemon = parameters.get("daemon")
        credentials = parameters.get("credentials")
        if not isinstance(credentials, list):
            raise ProtocolError("tokend's Status reply has no credentials list")
        return cls(
            daemon=DaemonStatus.from_wire(daemon) if daemon is not None else None,
            credentials=[CredentialStatus.from_wire(item) for item in credentials],
        )


    @classmethod
    def from_replies(cls, replies: Sequence[Mapping[str, Any]]) -> Status:
        """The replies of ``Status`` called with ``more``: the daemon in the first, credentials
        in batches."""
        if not replies:
            raise ProtocolError("tokend sent no Status reply")
        first = cls.from_wire(replies[0])
        credentials = list(first.credentials)
        for reply in replies[1:]:
            credentials.extend(cls.from_wire(reply).credentials)
        return cls(daemon=first.daemon, credentials=credentials)


def _from_wire(cls: type[_T], value: Any, where: str, not_an_object: str) -> _T:
    """The dataclass ``cls`` from a reply's object: each field ``snake_name`` from the key
    ``snakeName``, read as its annotation says (see ``_READERS``), in the order of the fields.
    ``ProtocolError`` when a field is malformed, or ``not_an_object`` when ``value`` is no object."""
    if not isinstance(value, dict):
        raise ProtocolError(not_an_object)
    fields = {}
    for field in dataclasses.fields(cls):  # type: ignore[arg-type]
        head, *rest = field.name.split("_")
        key = head + "".join(word.capitalize() for word in rest)
        fields[field.name] = _READERS[field.type](value, key, where)  # type: ignore[index]
    return cls(**fields)


def _required(kind: type[_T], described: str) -> Callable[[Mapping[str, Any], str, str], _T]:
    """The reader of a field that must be there as a ``kind`` (``described``: "a string")."""

    def read(value: Mapping[str, Any], key: str, where: str) -> _T:
        item = value.get(key)
        if not isinstance(item, kind):
            raise ProtocolError("tokend's reply has a %s without %s %r" % (where, described, key))
        return item

    return read


_string = _required(str, "a string")
_flag = _required(bool, "a boolean")


def _optional_string(value: Mapping[str, Any], key: str, where: str) -> str | None:
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
        return _dt.datetime.fromtimestamp(seconds, tz=_dt.UTC)
    except (OverflowError, OSError, ValueError):
        raise ProtocolError("tokend's reply has a %s whose %r is out of range" % (where, key)) from None


def _optional_time(value: Mapping[str, Any], key: str, where: str) -> _dt.datetime | None:
    if value.get(key) is None:
        return None
    return _time(value, key, where)


def _names(value: Mapping[str, Any], key: str, where: str) -> tuple[str, ...]:
    items = value.get(key)
    if not isinstance(items, list) or not all(isinstance(item, str) for item in items):
        raise ProtocolError("tokend's reply has a %s without a %s list" % (where, key))
    return tuple(items)


def _optional_names(value: Mapping[str, Any], key: str, where: str) -> tuple[str, ...] | None:
    items = value.get(key)
    return tuple(item for item in items if isinstance(item, str)) if isinstance(items, list) else None


def _optional_quota_usage(value: Mapping[str, Any], key: str, where: str) -> QuotaUsage | None:
    item = value.get(key)
    if item is None:
        return None
    return _from_wire(
        QuotaUsage, item, "%s whose %r is a quota usage" % (where, key), "tokend's reply has a %s whose %r is not an object" % (where, key)
    )


def _optional_flag(value: Mapping[str, Any], key: str, where: str) -> bool | None:
    item = value.get(key)
    return item if isinstance(item, bool) else None


#: How a field is read, by its annotation (a string: ``from __future__ import annotations``).
#: Required fields must be there with their type; optional ones may be missing or null (lists
#: and flags that are not what they should be count as missing).
_READERS: dict[str, Callable[[Mapping[str, Any], str, str], Any]] = {
    "str": _string,
    "str | None": _optional_string,
    "int": _integer,
    "_dt.datetime": _time,
    "_dt.datetime | None": _optional_time,
    "tuple[str, ...]": _names,
    "tuple[str, ...] | None": _optional_names,
    "bool": _flag,
    "bool | None": _optional_flag,
    "QuotaUsage | None": _optional_quota_usage,
}

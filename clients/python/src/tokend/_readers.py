"""The reader grammar: who may read a credential's token.

``uid:N``, ``gid:N``, ``user:NAME``, ``group:NAME``, ``unit:NAME.service`` (or ``.scope``),
``exe:/PATH``, ``exe:/PATH@sha256:HEX``, and ``uid:N`` or ``user:NAME`` joined by ``+`` to a
``unit:`` or ``exe:`` reader, as the daemon parses them (its one definition is
Sources/TokendReaders/Reader.swift); the tests read the same table of cases as the daemon's and
the Go client's (Tests/Fixtures/reader-grammar.json).
"""

from __future__ import annotations

import unicodedata

__all__ = ["ReaderError", "parse_reader"]

KINDS = ("uid", "user", "gid", "group", "unit", "exe")
MAXIMUM_NAME_BYTES = 255
MAXIMUM_UNIT_BYTES = 255
MAXIMUM_PATH_BYTES = 4095
_MAXIMUM_ID = 4294967294  # 4294967295 is (uid_t)-1, "no id"
_UNIT_SUFFIXES = (".service", ".scope")
_UNIT_CHARACTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789:-_.\\@")
_HASH_MARK = "@sha256:"
_HEX = frozenset("0123456789abcdefABCDEF")
_USAGE = "expected uid:N, gid:N, user:NAME, group:NAME, unit:NAME.service, exe:/PATH[@sha256:HEX] or uid:N+unit:NAME.service"


class ReaderError(ValueError):
    """A text that is not a reader. ``problem`` is ``no-kind``, ``unknown-kind``, ``invalid-id``,
    ``invalid-name``, ``invalid-unit``, ``invalid-path`` or ``invalid-combination``; ``text`` is the
    refused text."""

    def __init__(self, problem: str, text: str) -> None:
        self.problem = problem
        self.text = text
        super().__init__(_message(problem, text))


def parse_reader(text: str) -> str:
    """The canonical form of reader ``text`` (``uid:007`` -> ``uid:7``; a sha256 in lower case).

    Raises:
        ReaderError: ``text`` is not a reader of the grammar above.
    """
    kind, colon, _ = text.partition(":")
    if not colon:
        raise ReaderError("no-kind", text)
    if kind not in KINDS:
        raise ReaderError("unknown-kind", text)
    # A '+' joins a uid: or user: reader to a unit: or exe: reader. No reader but an exe: path
    # holds a '+' of its own, so the first '+' is the join: the left side is parsed first (a
    # refusal names its problem), then the two kinds are checked, then the right side.
    if "+" in text and kind != "exe":
        left, _, right = text.partition("+")
        joined = _single(left, text)
        right_kind, right_colon, _ = right.partition(":")
        if kind not in ("uid", "user") or not right_colon or right_kind not in ("unit", "exe") or (right_kind == "unit" and "+" in right):
            raise ReaderError("invalid-combination", text)
        return "%s+%s" % (joined, _single(right, text))
    return _single(text, text)


def _single(part: str, text: str) -> str:
    """One reader without a '+' join; refusals name the whole ``text``."""
    kind, _, value = part.partition(":")
    if kind in ("uid", "gid"):
        # ASCII digits only: int() would take "+1", " 1", "1_0" and other scripts' digits.
        if not value or not all("0" <= ch <= "9" for ch in value) or int(value) > _MAXIMUM_ID:
            raise ReaderError("invalid-id", text)
        return "%s:%d" % (kind, int(value))
    if kind == "unit":
        if not _is_unit(value):
            raise ReaderError("invalid-unit", text)
        return "unit:" + value
    if kind == "exe":
        path, digest = _split_digest(value)
        if not _is_path(path):
            raise ReaderError("invalid-path", text)
        return "exe:" + path + ("" if digest is None else _HASH_MARK + digest.lower())
    if not _is_name(value):
        raise ReaderError("invalid-name", text)
    return "%s:%s" % (kind, value)


def _is_name(value: str) -> bool:
    """1 to 255 UTF-8 bytes; no whitespace, control character, ':' or '/'; not starting with '-' or '+'."""
    if not value or len(value.encode("utf-8", "surrogatepass")) > MAXIMUM_NAME_BYTES or value[0] in "-+":
        return False
    return not any(ch.isspace() or _is_control(ch) or ch in ":/" for ch in value)


def _is_unit(value: str) -> bool:
    """A systemd unit name (ASCII letters, digits, ':', '-', '_', '.', '\\', '@'), at most 255 bytes,
    ending in .service or .scope after a non-empty prefix."""
    if len(value) > MAXIMUM_UNIT_BYTES or not all(ch in _UNIT_CHARACTERS for ch in value):
        return False
    return any(value.endswith(suffix) and len(value) > len(suffix) for suffix in _UNIT_SUFFIXES)


def _split_digest(value: str) -> tuple[str, str | None]:
    """The path and the sha256: the last '@sha256:' followed by exactly 64 hex digits at the end;
    anything else is all path."""
    mark = value.rfind(_HASH_MARK)
    if mark < 0:
        return value, None
    digest = value[mark + len(_HASH_MARK) :]
    if len(digest) != 64 or not all(ch in _HEX for ch in digest):
        return value, None
    return value[:mark], digest


def _is_path(path: str) -> bool:
    """Absolute, 1 to 4095 bytes, no control character, no empty, '.' or '..' component, no trailing '/'."""
    if (
        not path.startswith("/")
        or any(_is_control(ch) for ch in path)
        or len(path.encode("utf-8", "surrogatepass")) > MAXIMUM_PATH_BYTES
    ):
        return False
    return all(component not in ("", ".", "..") for component in path[1:].split("/"))


def _is_control(ch: str) -> bool:
    return unicodedata.category(ch) == "Cc"


def _message(problem: str, text: str) -> str:
    shown = "".join(ch if not _is_control(ch) else repr(ch)[1:-1] for ch in text[:80]) + ("…" if len(text) > 80 else "")
    if problem == "no-kind":
        return "reader '%s' has no kind; %s" % (shown, _USAGE)
    if problem == "unknown-kind":
        kind = "".join(ch if not _is_control(ch) else repr(ch)[1:-1] for ch in text.partition(":")[0][:80])
        return "reader '%s' has an unknown kind '%s'; %s" % (shown, kind, _USAGE)
    if problem == "invalid-id":
        return "reader '%s' has no valid numeric id (0 to 4294967294); %s" % (shown, _USAGE)
    if problem == "invalid-unit":
        return (
            "reader '%s' has no valid unit name (a .service or .scope unit of at most 255 bytes: "
            "ASCII letters, digits, ':', '-', '_', '.', '\\' and '@')" % shown
        )
    if problem == "invalid-path":
        return (
            "reader '%s' has no valid executable path (absolute, at most 4095 bytes, no control character, "
            "no empty, '.' or '..' component, no trailing '/'; optionally @sha256: and 64 hex digits)" % shown
        )
    if problem == "invalid-combination":
        return "reader '%s' joins readers with '+' other than uid:N or user:NAME + unit:NAME or exe:PATH" % shown
    return (
        "reader '%s' has no valid name (1 to 255 bytes; no whitespace, control character, ':' or '/'; "
        "not starting with '-' or '+')" % shown
    )

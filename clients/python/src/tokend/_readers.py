"""The reader grammar: who may read a credential's token.

``uid:N``, ``gid:N``, ``user:NAME`` or ``group:NAME``, as the daemon parses them (its one
definition is Sources/TokendReaders/Reader.swift); the tests read the same table of cases as the
daemon's and the Go client's (Tests/Fixtures/reader-grammar.json).
"""

from __future__ import annotations

import unicodedata

__all__ = ["ReaderError", "parse_reader"]

KINDS = ("uid", "user", "gid", "group")
MAXIMUM_NAME_BYTES = 255
_MAXIMUM_ID = 4294967294  # 4294967295 is (uid_t)-1, "no id"
_USAGE = "expected uid:N, gid:N, user:NAME or group:NAME"


class ReaderError(ValueError):
    """A text that is not a reader. ``problem`` is ``no-kind``, ``unknown-kind``, ``invalid-id`` or
    ``invalid-name``; ``text`` is the refused text."""

    def __init__(self, problem: str, text: str) -> None:
        self.problem = problem
        self.text = text
        super().__init__(_message(problem, text))


def parse_reader(text: str) -> str:
    """The canonical form of reader ``text`` (``uid:007`` -> ``uid:7``).

    Raises:
        ReaderError: ``text`` is not ``uid:N``, ``gid:N``, ``user:NAME`` or ``group:NAME``.
    """
    kind, colon, value = text.partition(":")
    if not colon:
        raise ReaderError("no-kind", text)
    if kind not in KINDS:
        raise ReaderError("unknown-kind", text)
    if kind in ("uid", "gid"):
        # ASCII digits only: int() would take "+1", " 1", "1_0" and other scripts' digits.
        if not value or not all("0" <= ch <= "9" for ch in value) or int(value) > _MAXIMUM_ID:
            raise ReaderError("invalid-id", text)
        return "%s:%d" % (kind, int(value))
    if not _is_name(value):
        raise ReaderError("invalid-name", text)
    return "%s:%s" % (kind, value)


def _is_name(value: str) -> bool:
    """1 to 255 UTF-8 bytes; no whitespace, control character, ':' or '/'; not starting with '-' or '+'."""
    if not value or len(value.encode("utf-8", "surrogatepass")) > MAXIMUM_NAME_BYTES or value[0] in "-+":
        return False
    return not any(ch.isspace() or _is_control(ch) or ch in ":/" for ch in value)


def _is_control(ch: str) -> bool:
    return unicodedata.category(ch) == "Cc"


def _message(problem: str, text: str) -> str:
    shown = "".join(ch if not _is_control(ch) else repr(ch)[1:-1] for ch in text[:80]) + ("…" if len(text) > 80 else "")
    if problem == "no-kind":
        return "reader '%s' has no kind; %s" % (shown, _USAGE)
    if problem == "unknown-kind":
        return "reader '%s' has an unknown kind '%s'; %s" % (shown, text.partition(":")[0][:80], _USAGE)
    if problem == "invalid-id":
        return "reader '%s' has no valid numeric id (0 to 4294967294); %s" % (shown, _USAGE)
    return (
        "reader '%s' has no valid name (1 to 255 bytes; no whitespace, control character, ':' or '/'; "
        "not starting with '-' or '+')" % shown
    )

"""Operator examples taken from the documentation, so that the layer runs them as written.

A fenced code block in a document is marked for the layer by an HTML comment on the line before
its opening fence (invisible when the page is rendered):

    <!-- realhost: install-by-hand -->
    ```sh
    systemd-sysusers && systemd-tmpfiles --create
    ```

`snippet(path, name)` returns the block's text. A marker without a block, or a name used twice,
is an error, and so is a marker no scenario asked for (`unused_markers`), so examples and tests
cannot drift apart silently.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
_MARKER = re.compile(r"^\s*<!--\s*realhost:\s*([a-z0-9-]+)\s*-->\s*$")
_asked: set[tuple[str, str]] = set()


def blocks(path: str) -> dict[str, str]:
    lines = (REPO / path).read_text().splitlines()
    found: dict[str, str] = {}
    for index, line in enumerate(lines):
        match = _MARKER.match(line)
        if not match:
            continue
        name = match.group(1)
        if name in found:
            raise ValueError(f"{path}: the example {name} is marked twice")
        if index + 1 >= len(lines) or not lines[index + 1].lstrip().startswith("```"):
            raise ValueError(f"{path}:{index + 1}: the marker {name} is not followed by a code block")
        fence = lines[index + 1].lstrip()[:3]
        indent = len(lines[index + 1]) - len(lines[index + 1].lstrip())
        body: list[str] = []
        for inner in lines[index + 2:]:
            if inner.lstrip().startswith(fence):
                break
            body.append(inner[indent:] if inner[:indent].strip() == "" else inner)
        else:
            raise ValueError(f"{path}:{index + 1}: the code block of {name} is not closed")
        found[name] = "\n".join(body) + "\n"
    return found


def snippet(path: str, name: str) -> str:
    """The text of the block marked `name` in `path` (relative to the repository)."""
    _asked.add((path, name))
    found = blocks(path)
    if name not in found:
        raise KeyError(f"{path} has no example marked <!-- realhost: {name} -->")
    return found[name]


def unused_markers(paths: list[str]) -> list[str]:
    """Marked examples in `paths` that no scenario of this run asked for."""
    return [f"{path}: {name}" for path in paths for name in blocks(path) if (path, name) not in _asked]

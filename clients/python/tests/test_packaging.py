"""The package itself: its metadata, Python 3.11 syntax, lazy imports of the HTTP libraries."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path

import tokend

REPOSITORY = Path(__file__).resolve().parents[3]


def test_the_package_parses_as_python_3_11():
    """requires-python is >= 3.11: no syntax newer than that."""
    package = Path(tokend.__file__).parent
    files = sorted(package.glob("*.py"))
    assert len(files) >= 9
    for path in files:
        ast.parse(path.read_text(), filename=str(path), feature_version=(3, 11))


def test_one_name_one_version_the_daemons():
    """Distribution and import are both ``tokend`` (Debian: python3-tokend); the version has one
    source, ``tokend.__version__``, and it is the daemon's (Sources/TokendProtocol/TokendVersion.swift)."""
    metadata = importlib.metadata.metadata("tokend")
    assert metadata["Name"] == "tokend"
    assert importlib.metadata.version("tokend") == tokend.__version__
    swift = (REPOSITORY / "Sources/TokendProtocol/TokendVersion.swift").read_text()
    assert re.search(r'static let string = "([^"]+)"', swift).group(1) == tokend.__version__
    assert metadata["Requires-Python"] == ">=3.11"
    assert "Apache-2.0" in (metadata.get("License") or metadata.get("License-Expression") or "")
    assert metadata.get_all("Project-URL")


def test_the_old_exception_names_are_the_new_classes():
    assert tokend.Timeout is tokend.DaemonTimeoutError
    assert tokend.PermissionDenied is tokend.PermissionDeniedError
    assert tokend.UnknownUser is tokend.UnknownUserError
    assert tokend.InvalidParameter is tokend.InvalidParameterError
    assert tokend.DaemonUnavailable is tokend.DaemonUnavailableError
    for name in tokend.__all__:
        value = getattr(tokend, name)
        if isinstance(value, type) and issubclass(value, tokend.TokendError):
            assert value.__name__.endswith("Error"), name
    assert issubclass(tokend.DaemonTimeoutError, TimeoutError)
    assert issubclass(tokend.PermissionDeniedError, PermissionError)


def test_importing_tokend_does_not_import_requests_or_httpx():
    result = subprocess.run(
        [sys.executable, "-c", "import sys, tokend; print('requests' in sys.modules, 'httpx' in sys.modules)"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.stdout.split() == ["False", "False"], result.stderr

"""The package itself: Python 3.9 syntax, lazy imports of the HTTP libraries."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import tokend


def test_the_package_parses_as_python_3_9():
    """The package must run on Python 3.9: no syntax newer than that (match, except*, ...)."""
    package = Path(tokend.__file__).parent
    files = sorted(package.glob("*.py"))
    assert len(files) >= 8
    for path in files:
        source = path.read_text()
        ast.parse(source, filename=str(path), feature_version=(3, 9))
        # Annotations are only strings (PEP 563), so `X | Y` in them is harmless on 3.9.
        assert "from __future__ import annotations" in source or path.name == "__init__.py", path


def test_importing_tokend_does_not_import_requests_or_httpx():
    result = subprocess.run(
        [sys.executable, "-c", "import sys, tokend; print('requests' in sys.modules, 'httpx' in sys.modules)"],
        capture_output=True, text=True, timeout=30,
    )
    assert result.stdout.split() == ["False", "False"], result.stderr

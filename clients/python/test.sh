#!/usr/bin/env bash
# Tests of the Python client against the real tokend and the real test IdP.
#
#   clients/python/test.sh BIN_DIR [pytest arguments...]
#
# BIN_DIR holds the tokend binary (default: $TOKEND_BIN_DIR, else <repo>/.build/debug).
# Uses the test venv ($TOKEND_VENV, else <repo>/.venv, made by scripts/test-venv.sh), installs
# this package into it with pip (offline: no index, no build isolation; the venv's pinned
# setuptools builds it), checks it with ruff and mypy --strict (pinned in Tests/idp/requirements.txt),
# then runs pytest, bounded by TOKEND_PYTHON_TEST_LIMIT seconds (300).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
if [ $# -ge 1 ] && [ "${1#-}" = "$1" ]; then
    bin_dir="$1"
    shift
else
    bin_dir="${TOKEND_BIN_DIR:-$root/.build/debug}"
fi
if [ ! -x "$bin_dir/tokend" ]; then
    echo "clients/python/test.sh: no tokend binary in $bin_dir" >&2
    exit 2
fi
bin_dir="$(cd "$bin_dir" && pwd)"
export TOKEND_BIN_DIR="$bin_dir"

venv="${TOKEND_VENV:-$root/.venv}"
python="$(TOKEND_VENV="$venv" bash "$root/scripts/test-venv.sh" | tail -1)"

# Install (again) when the package's files changed since the last install into this venv.
# Built from a copy so that the source tree gets no build/ or *.egg-info; under a lock so that
# concurrent runs do not reinstall under each other's feet.
want="$( { cd "$here" && find pyproject.toml README.md src -type f ! -name '*.pyc' -print0 | sort -z | xargs -0 sha256sum; } | sha256sum | cut -d' ' -f1)"
stamp="$venv/.tokend-python-client.sha256"
(
    flock 9
    if [ "$(cat "$stamp" 2>/dev/null || true)" != "$want" ] || ! "$python" -c 'import tokend' 2>/dev/null; then
        work="$(mktemp -d)"
        trap 'rm -rf "$work"' EXIT
        cp -r "$here/pyproject.toml" "$here/README.md" "$here/src" "$work/"
        rm -rf "$work/src/"*.egg-info
        "$python" -m pip install --disable-pip-version-check --no-input -q \
            --no-index --no-build-isolation --no-deps --force-reinstall "$work" >&2
        echo "$want" >"$stamp"
    fi
) 9>"$venv/.tokend-python-client.lock"

cd "$here"
export PYTHONDONTWRITEBYTECODE=1  # no __pycache__ in the tree
# Lint and type check first (settings in pyproject.toml); caches outside the tree.
cache="${XDG_CACHE_HOME:-$HOME/.cache}/tokend-python"
"$venv/bin/ruff" check --no-cache src tests
"$venv/bin/mypy" --cache-dir "$cache/mypy" --config-file pyproject.toml
limit="${TOKEND_PYTHON_TEST_LIMIT:-300}"
status=0
# -p no:cacheprovider: no .pytest_cache in the tree. Runs from the installed package, not src/.
[ $# -gt 0 ] || set -- tests
timeout --kill-after=15 "$limit" "$python" -m pytest -p no:cacheprovider -q "$@" || status=$?
if [ "$status" -eq 124 ] || [ "$status" -eq 137 ]; then
    echo "clients/python/test.sh: the tests ran longer than ${limit}s and were stopped" >&2
fi
exit "$status"

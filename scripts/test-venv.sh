#!/usr/bin/env bash
# Create or update the Python venv used by the test harness (Tests/idp: the
# django-oauth-toolkit test IdP, the fault proxy, the varlink client; Tests/interop: boto3,
# moto and google-auth for the credential-helper tests).
#
#   scripts/test-venv.sh            -> venv at <repo>/.venv
#   TOKEND_VENV=/x scripts/test-venv.sh
#   TOKEND_PYTHON=python3.11 ...    -> base interpreter (default: python3)
#
# Idempotent and safe to run concurrently (flock): the pip install is skipped
# when the stamp file matches the hash of requirements.txt + the interpreter.
# All progress goes to stderr; the LAST line of stdout is the venv's python.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${TOKEND_VENV:-$root/.venv}"
req="$root/Tests/idp/requirements.txt"
interop_req="$root/Tests/interop/requirements.txt"
base_python="${TOKEND_PYTHON:-python3}"
stamp="$venv/.tokend-requirements.sha256"

"$base_python" -c 'import sys; sys.exit(sys.version_info < (3, 10))' || {
    echo "test-venv: $base_python is older than 3.10 (Django 5.2 needs 3.10+)" >&2
    exit 1
}

mkdir -p "$venv"
exec 9>"$venv/.lock"
flock 9

want="$( { cat "$req" "$interop_req"; "$base_python" -c 'import sys; print(sys.version)'; } | sha256sum | cut -d' ' -f1)"

# Recreate a venv whose interpreter no longer runs (e.g. base python removed).
if [ -e "$venv/bin/python" ] && ! "$venv/bin/python" -c '' 2>/dev/null; then
    echo "test-venv: $venv is broken, recreating" >&2
    find "$venv" -mindepth 1 -maxdepth 1 ! -name .lock -exec rm -rf {} +
fi
if [ ! -x "$venv/bin/python" ]; then
    echo "test-venv: creating $venv" >&2
    "$base_python" -m venv "$venv" >&2
fi

if [ "$(cat "$stamp" 2>/dev/null || true)" != "$want" ]; then
    echo "test-venv: installing $req and $interop_req" >&2
    "$venv/bin/python" -m pip install --disable-pip-version-check --no-input -q -r "$req" -r "$interop_req" >&2
    echo "$want" >"$stamp"
else
    echo "test-venv: up to date ($venv)" >&2
fi

echo "$venv/bin/python"

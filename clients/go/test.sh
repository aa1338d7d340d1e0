#!/usr/bin/env bash
# Runs the Go client's tests against the real tokend and the real test IdP, offline.
#
#   clients/go/test.sh BIN_DIR [go test flags...]
#
# BIN_DIR holds the built tokend (and tokenctl); default $TOKEND_BIN_DIR. The test IdP runs
# from the venv at $TOKEND_VENV or <repo>/.venv (made by scripts/test-venv.sh). Go and
# golang.org/x/oauth2 come from Debian: when they are missing this script installs
# golang-go and golang-golang-x-oauth2-dev with apt-get, and nothing else. No module proxy
# is used (GOPROXY=off; see GOFLAGS below); the build cache and the go.mod copy with Debian's
# paths live in ${XDG_CACHE_HOME:-$HOME/.cache}/tokend-go.
# The race detector is on when cgo and a C compiler are available (TOKEND_GO_RACE=0: off).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)

bin_dir=${1:-${TOKEND_BIN_DIR:-}}
[ $# -gt 0 ] && shift
if [ -z "$bin_dir" ]; then
    echo "usage: $0 BIN_DIR [go test flags...]   (BIN_DIR holds the built tokend)" >&2
    exit 2
fi
if ! resolved=$(cd "$bin_dir" 2>/dev/null && pwd); then
    echo "test.sh: no directory $bin_dir" >&2
    exit 2
fi
bin_dir=$resolved
if [ ! -x "$bin_dir/tokend" ]; then
    echo "test.sh: no tokend binary in $bin_dir" >&2
    exit 2
fi

venv=${TOKEND_VENV:-$repo/.venv}
if [ ! -x "$venv/bin/python" ]; then
    echo "test.sh: the test IdP's venv is missing at $venv: run scripts/test-venv.sh first" >&2
    exit 2
fi

oauth2_src=/usr/share/gocode/src/golang.org/x/oauth2
net_src=/usr/share/gocode/src/golang.org/x/net
if ! command -v go >/dev/null 2>&1 || [ ! -f "$oauth2_src/go.mod" ] || [ ! -d "$net_src/context/ctxhttp" ]; then
    echo "test.sh: installing Go and golang.org/x/oauth2 from Debian" >&2
    sudo=""
    if [ "$(id -u)" -ne 0 ]; then sudo="sudo -n"; fi
    export DEBIAN_FRONTEND=noninteractive
    if ! $sudo apt-get install -y -qq golang-go golang-golang-x-oauth2-dev >/dev/null; then
        $sudo apt-get update -qq
        $sudo apt-get install -y -qq golang-go golang-golang-x-oauth2-dev >/dev/null
    fi
fi

cache=${XDG_CACHE_HOME:-$HOME/.cache}/tokend-go
mkdir -p "$cache"
# go.mod and go.sum are what a program importing this module gets from the module proxy. Here
# the requirements come from Debian's sources instead: the go command reads a copy of go.mod with
# replace lines into /usr/share/gocode (GOFLAGS=-modfile; a module replaced by a directory needs
# no go.sum entry), so nothing is downloaded and the repository's go.mod stays portable.
modfile="$cache/go.test.mod"
{
    cat "$here/go.mod"
    echo "replace golang.org/x/oauth2 => $oauth2_src"
    echo "replace golang.org/x/net => $net_src"
} >"$modfile"
rm -f "$cache/go.test.sum"
export GOPROXY=off GOFLAGS="-modfile=$modfile -mod=mod" GOTOOLCHAIN=local GOSUMDB=off \
    GOCACHE="$cache/build" GOPATH="$cache/path" GOMODCACHE="$cache/path/pkg/mod" \
    TOKEND_BIN_DIR="$bin_dir" TOKEND_VENV="$venv"

cd "$here"
unformatted=$(gofmt -l .)
if [ -n "$unformatted" ]; then
    echo "test.sh: not gofmt-formatted: $unformatted" >&2
    exit 1
fi
go vet ./...

race=()
if [ "${TOKEND_GO_RACE:-1}" != 0 ] && [ "$(go env CGO_ENABLED)" = 1 ] && command -v "$(go env CC)" >/dev/null 2>&1; then
    race=(-race)
fi
# The whole package's bound (each test bounds its own calls): ~50 s alone with -race, and over 120 s
# with a second suite beside it on two cores.
exec go test "${race[@]}" -count=1 -timeout 600s "$@" ./...

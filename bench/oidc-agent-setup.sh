#!/usr/bin/env bash
# oidc-agent-setup.sh - a headless oidc-agent with one account, for bench/oneshot.py.
#
#   bench/oidc-agent-setup.sh start DIR ISSUER REFRESH_TOKEN [ACCOUNT] [LIFETIME_S]
#       Starts oidc-agent in the foreground (-d) in its own session, with its own
#       OIDC_CONFIG_DIR (DIR/cfg) and socket (DIR/agent.sock), capped at LIFETIME_S (default 600)
#       by `timeout`; then creates ACCOUNT (default "bench") without any prompt:
#         oidc-gen --flow refresh --rt RT --issuer ISSUER --client-id tokend-test
#                  --client-secret tokend-test-secret (the test IdP's confidential client)
#       oidc-gen loads the new account into the running agent (no oidc-add needed).
#       Prints, on success, shell-style lines: OIDC_SOCK=... OIDC_AGENT_PID=... OIDC_ACCOUNT=...
#       On failure: exit 1, the reason on stderr, and the agent is stopped again.
#   bench/oidc-agent-setup.sh stop DIR
#       TERM to the agent's process group (KILL after 5 s). Safe to call twice.
#
# Needs oidc-agent-cli (Debian: apt-get install oidc-agent-cli). The account's encryption
# password is a fixed throwaway (the config lives in DIR, which the caller deletes).
set -euo pipefail

CLIENT_ID=${OIDC_BENCH_CLIENT_ID:-tokend-test}
CLIENT_SECRET=${OIDC_BENCH_CLIENT_SECRET:-tokend-test-secret}
SCOPE=${OIDC_BENCH_SCOPE:-openid offline_access read}

die() { echo "oidc-agent-setup: $*" >&2; exit 1; }

stop() { # DIR
    local dir=$1 pid i
    [ -f "$dir/agent.pid" ] || return 0
    pid=$(cat "$dir/agent.pid")
    kill -TERM -- "-$pid" 2>/dev/null || true
    for i in $(seq 50); do kill -0 -- "-$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$pid" 2>/dev/null || true
    rm -f "$dir/agent.pid"
}

start() { # DIR ISSUER RT [ACCOUNT] [LIFETIME]
    local dir=$1 issuer=$2 rt=$3 account=${4:-bench} lifetime=${5:-600} i
    command -v oidc-agent >/dev/null && command -v oidc-gen >/dev/null ||
        die "oidc-agent/oidc-gen not installed (apt-get install oidc-agent-cli)"
    mkdir -p "$dir/cfg" "$dir/tmp"
    chmod 700 "$dir" "$dir/cfg" "$dir/tmp"
    export OIDC_CONFIG_DIR="$dir/cfg" TMPDIR="$dir/tmp"
    local sock="$dir/agent.sock"
    rm -f "$sock"
    # setsid: the agent and its helper process form one process group, stopped together.
    setsid timeout --kill-after=5 "$lifetime" oidc-agent -d --no-autoload --no-webserver --no-scheme \
        --socket-path "$sock" </dev/null >"$dir/agent.log" 2>&1 &
    local pid=$!
    echo "$pid" >"$dir/agent.pid"
    for i in $(seq 100); do
        [ -S "$sock" ] && break
        kill -0 "$pid" 2>/dev/null || { cat "$dir/agent.log" >&2; stop "$dir"; die "oidc-agent exited at start"; }
        sleep 0.1
    done
    [ -S "$sock" ] || { cat "$dir/agent.log" >&2; stop "$dir"; die "oidc-agent made no socket within 10 s"; }
    export OIDC_SOCK="$sock" OIDC_ENCRYPTION_PW="bench-throwaway-pw"
    # oidc-gen insists on a redirect URI of the form http://localhost:<port>; the refresh flow never uses it.
    if ! timeout 60 oidc-gen "$account" --issuer "$issuer" --client-id "$CLIENT_ID" --client-secret "$CLIENT_SECRET" \
        --rt "$rt" --flow refresh --scope "$SCOPE" --redirect-uri http://localhost:8080/callback \
        --pw-env --confirm-default --no-url-call --prompt none -m </dev/null >"$dir/oidc-gen.log" 2>&1; then
        cat "$dir/oidc-gen.log" >&2
        stop "$dir"
        die "oidc-gen failed"
    fi
    if ! timeout 30 oidc-token "$account" >/dev/null 2>"$dir/oidc-token.err"; then
        cat "$dir/oidc-token.err" >&2
        stop "$dir"
        die "oidc-token $account failed after oidc-gen"
    fi
    echo "OIDC_SOCK=$sock"
    echo "OIDC_AGENT_PID=$pid"
    echo "OIDC_ACCOUNT=$account"
}

case "${1:-}" in
start) [ $# -ge 4 ] || die "usage: $0 start DIR ISSUER REFRESH_TOKEN [ACCOUNT] [LIFETIME_S]"; shift; start "$@" ;;
stop) [ $# -eq 2 ] || die "usage: $0 stop DIR"; stop "$2" ;;
*) sed -n '2,17p' "$0" >&2; exit 1 ;;
esac

#!/usr/bin/env bash
# admin-flood.sh - root's `tokenctl status` while another user floods tokend's socket.
#
#   bench/admin-flood.sh                 # release binaries in .build-release/dist
#   TOKEND_BIN=.build/debug/tokend TOKENCTL_BIN=.build/debug/tokenctl bench/admin-flood.sh
#
# Starts tokend on its default limits (max_connections 1024, 128 per uid), then times RUNS
# (default 40) runs of `tokenctl status` as root: first alone, then while bench/flood.py, run as
# uid 65534 in FLOOD_PROCESSES (default 4) processes, keeps CONNECTIONS (default 3000) connections
# in flight (each refused connection reconnects at once). Under the flood it times `tokenctl --socket PUBLIC status` (the public
# socket, named explicitly) and `TOKEND_SOCKET=PUBLIC tokenctl status` (tokenctl's own choice:
# root uses the administrators' socket beside it when there is one), and a resident client's
# connect + Status + reply on each socket (the daemon's part, without a process start).
# Prints p50/p90/max in ms.
# Bounded: the flood lasts at most FLOOD_SECONDS (default 60); everything started is stopped on
# exit. Not a test: it asserts nothing about timing.
set -euo pipefail

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_DIR=$(dirname "$BENCH_DIR")
TOKEND_BIN=${TOKEND_BIN:-$REPO_DIR/.build-release/dist/tokend}
TOKENCTL_BIN=${TOKENCTL_BIN:-$REPO_DIR/.build-release/dist/tokenctl}
RUNS=${RUNS:-40}
CONNECTIONS=${CONNECTIONS:-3000}
FLOOD_PROCESSES=${FLOOD_PROCESSES:-4}
FLOOD_SECONDS=${FLOOD_SECONDS:-60}
(( FLOOD_SECONDS > 300 )) && FLOOD_SECONDS=300

[[ $(id -u) == 0 ]] || { echo "run as root (the flood runs as uid 65534 with setpriv)" >&2; exit 1; }
[[ -x "$TOKEND_BIN" && -x "$TOKENCTL_BIN" ]] || { echo "no tokend/tokenctl at $TOKEND_BIN / $TOKENCTL_BIN" >&2; exit 1; }
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
(( $(ulimit -n) > CONNECTIONS + 1000 )) || { echo "descriptor limit $(ulimit -n) too low for CONNECTIONS=$CONNECTIONS" >&2; exit 1; }

work=$(mktemp -d /tmp/tokend-admin-flood.XXXXXX)
chmod 755 "$work"
pid=""
flood=""
cleanup() {
    for process in $flood; do kill -9 "$process" 2>/dev/null && wait "$process" 2>/dev/null; done
    [[ -n "$pid" ]] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT

cat >"$work/tokend.toml" <<TOML
[daemon]
socket = "$work/tokend.sock"
state_directory = "$work/state"
key_file = "$work/state/tokend.key"
log_level = "notice"
TOML
"$TOKEND_BIN" --config "$work/tokend.toml" >"$work/tokend.log" 2>&1 &
pid=$!
for _ in $(seq 100); do [[ -S "$work/tokend.sock" ]] && break; sleep 0.1; done
[[ -S "$work/tokend.sock" ]] || { cat "$work/tokend.log" >&2; exit 1; }

# Milliseconds per run of "$@", one per line.
time_runs() {
    for _ in $(seq "$RUNS"); do
        start=$(date +%s%N)
        "$@" >/dev/null 2>>"$work/errors" || echo "failed: $*" >>"$work/errors"
        echo $(( ($(date +%s%N) - start) / 1000 ))
        sleep 0.05
    done
}
# Milliseconds per connect + Status + reply from one resident client (no process start), RUNS times.
round_trips() {
    python3 - "$1" "$RUNS" <<'PY'
import socket, sys, time
path, runs = sys.argv[1], int(sys.argv[2])
for _ in range(runs):
    start = time.perf_counter()
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(30)
    # A full accept queue refuses a connect at once (EAGAIN): the wait for room counts too.
    while True:
        try:
            s.connect(path)
            break
        except BlockingIOError:
            if time.perf_counter() - start > 30:
                raise
            time.sleep(0.001)
    s.sendall(b'{"method":"io.tokend.TokenProvider.Status","parameters":{}}\0')
    data = b""
    while not data.endswith(b"\0"):
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    s.close()
    print(int((time.perf_counter() - start) * 1_000_000))
    time.sleep(0.05)
PY
}
summary() {
    python3 -c '
import sys
name = sys.argv[1]
values = sorted(int(x) / 1000 for x in sys.stdin.read().split())
pick = lambda q: values[min(len(values) - 1, int(q * len(values)))]
print(f"{name:<44} {pick(0.5):>8.1f} {pick(0.9):>8.1f} {values[-1]:>8.1f}")
' "$1"
}

echo "tokenctl status as root, $RUNS runs each; flood: $CONNECTIONS connections of uid 65534 from $FLOOD_PROCESSES processes"
printf '%-44s %8s %8s %8s\n' "" "p50 ms" "p90 ms" "max ms"
time_runs "$TOKENCTL_BIN" --socket "$work/tokend.sock" status | summary "alone, public socket"
round_trips "$work/tokend.sock" | summary "alone, public socket, one Status round trip"
# FLOOD_PROCESSES clients share the connections (one Python process alone does not keep a release
# tokend's accept queue full). setpriv execs python3, so each $! is a flood process itself;
# flood.py stops by itself after FLOOD_SECONDS.
flood=""
for index in $(seq "$FLOOD_PROCESSES"); do
    setpriv --reuid=65534 --regid=65534 --clear-groups /usr/bin/python3 "$BENCH_DIR/flood.py" --socket "$work/tokend.sock" \
        --connections $((CONNECTIONS / FLOOD_PROCESSES)) --seconds "$FLOOD_SECONDS" >"$work/flood-$index.json" 2>>"$work/flood.err" &
    flood="$flood $!"
done
sleep 3
time_runs "$TOKENCTL_BIN" --socket "$work/tokend.sock" status | summary "flood, public socket (--socket)"
TOKEND_SOCKET="$work/tokend.sock" time_runs "$TOKENCTL_BIN" status | summary "flood, tokenctl's choice (TOKEND_SOCKET)"
round_trips "$work/tokend.sock" | summary "flood, public socket, one Status round trip"
if [[ -S "$work/tokend.sock.admin" ]]; then
    round_trips "$work/tokend.sock.admin" | summary "flood, administrators' socket, round trip"
fi
for process in $flood; do kill -9 "$process" 2>/dev/null; wait "$process" 2>/dev/null || true; done
flood=""
[[ -s "$work/flood.err" ]] && { echo "the flood failed:" >&2; head -5 "$work/flood.err" >&2; exit 1; }
echo "refused connections logged: $(grep -c 'connection refused' "$work/tokend.log" || true) lines"
[[ -s "$work/errors" ]] && { echo "errors:"; sort "$work/errors" | uniq -c | head; }
exit 0

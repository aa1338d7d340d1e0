#!/usr/bin/env bash
# abuse-report.sh - what hostile clients cost a release tokend (issue 8, point 4).
#
#   bench/abuse-report.sh            # needs a release tokend (swift build -c release ...)
#   SECONDS_PER_PHASE=20 IDLE=3000 bench/abuse-report.sh
#
# Two phases against one daemon: well-behaved clients alone (loadgen, GetInfo ping-pong), then
# the same while bench/abuse.py runs thousands of idle connections, slowloris clients, clients
# that never read, oversized messages, deep JSON nesting and invalid UTF-8. Prints a table of
# peak RSS (VmHWM) and well-behaved latency p50/p99 per phase, what the abusers saw, and the
# daemon's log lines for each limit it enforced; writes bench/results/abuse.json.
# Bounded: each phase SECONDS_PER_PHASE (default 20, at most 300); everything started is
# stopped on exit. Not a test: it asserts nothing about timing.
set -euo pipefail

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_DIR=$(dirname "$BENCH_DIR")
TOKEND_BIN=${TOKEND_BIN:-$REPO_DIR/.build-release/dist/tokend}
PHASE=${SECONDS_PER_PHASE:-20}
(( PHASE > 300 )) && PHASE=300
IDLE=${IDLE:-3000}
SLOWLORIS=${SLOWLORIS:-50}
NON_READERS=${NON_READERS:-20}
FLOODERS=${FLOODERS:-5}
CONNECTIONS=${CONNECTIONS:-4}          # well-behaved loadgen connections
MAX_CONNECTIONS=${MAX_CONNECTIONS:-$((IDLE + SLOWLORIS + NON_READERS + 3 * FLOODERS + CONNECTIONS + 64))}
MESSAGE_TIMEOUT=${MESSAGE_TIMEOUT:-5s}
OUT=${OUT:-$BENCH_DIR/results/abuse.json}

[[ -x "$TOKEND_BIN" ]] || { echo "no release tokend at $TOKEND_BIN (swift build -c release --product tokend)" >&2; exit 1; }
make -s -C "$BENCH_DIR" >/dev/null
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
(( $(ulimit -n) > IDLE + 1000 )) || { echo "descriptor limit $(ulimit -n) too low for IDLE=$IDLE" >&2; exit 1; }

work=$(mktemp -d /tmp/tokend-abuse.XXXXXX)
pid=""
cleanup() {
    [[ -n "$pid" ]] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT

cat >"$work/tokend.toml" <<EOF
[daemon]
socket = "$work/tokend.sock"
state_directory = "$work/state"
key_file = "$work/state/tokend.key"
max_connections = $MAX_CONNECTIONS
max_message_bytes = 65536
max_pipelined_calls = 128
message_timeout = "$MESSAGE_TIMEOUT"
log_level = "info"
EOF
"$TOKEND_BIN" --config "$work/tokend.toml" >"$work/tokend.log" 2>&1 &
pid=$!
for _ in $(seq 100); do [[ -S "$work/tokend.sock" ]] && break; sleep 0.1; done
[[ -S "$work/tokend.sock" ]] || { cat "$work/tokend.log" >&2; exit 1; }
printf '%s' '{"method":"org.varlink.service.GetInfo"}' >"$work/call.json"

vm() { awk -v k="$1:" '$1 == k { print $2 }' "/proc/$pid/status"; }   # KiB
loadgen() {
    "$BENCH_DIR/.bin/loadgen" --socket "$work/tokend.sock" --connections "$CONNECTIONS" --duration "$PHASE" \
        --message-file "$work/call.json" --warmup 100 --json --quiet --label "$1" --max-seconds $((PHASE + 30))
}

# Phase 1: well-behaved clients alone.
rss_start=$(vm VmRSS)
quiet=$(loadgen quiet)
hwm_quiet=$(vm VmHWM)

# Phase 2: the same while the abusers run (they start once loadgen has connected and warmed up).
loadgen abused >"$work/abused.json" &
lg=$!
sleep 1
timeout $((PHASE + 60)) python3 "$BENCH_DIR/abuse.py" --socket "$work/tokend.sock" --seconds "$PHASE" \
    --idle "$IDLE" --slowloris "$SLOWLORIS" --non-readers "$NON_READERS" \
    --oversized "$FLOODERS" --deep "$FLOODERS" --bad-utf8 "$FLOODERS" >"$work/abusers.json" &
ab=$!
peak_open=0
while kill -0 "$lg" 2>/dev/null; do
    open=$(ls "/proc/$pid/fd" 2>/dev/null | wc -l)
    (( open > peak_open )) && peak_open=$open
    sleep 1
done
wait "$lg" || true
hwm_abused=$(vm VmHWM)
wait "$ab" || true
rss_end=$(vm VmRSS)
# After the abuse: are well-behaved clients still served normally?
after=$(PHASE=5 loadgen after)
alive=$(kill -0 "$pid" 2>/dev/null && echo true || echo false)

logcount() { grep -c -- "$1" "$work/tokend.log" || true; }
python3 - "$OUT" "$work" <<EOF
import json, sys
out, work = sys.argv[1], sys.argv[2]
def lg(text):
    return json.loads(text.strip().splitlines()[-1])
quiet, abused, after = lg('''$quiet'''), lg(open(work + "/abused.json").read()), lg('''$after''')
abusers = json.loads(open(work + "/abusers.json").read() or "{}")
report = {
    "tokend": "$TOKEND_BIN", "seconds_per_phase": $PHASE, "well_behaved_connections": $CONNECTIONS,
    "abusers": {"idle": $IDLE, "slowloris": $SLOWLORIS, "non_readers": $NON_READERS, "oversized": $FLOODERS,
                "deep_nesting": $FLOODERS, "invalid_utf8": $FLOODERS},
    "limits": {"max_connections": $MAX_CONNECTIONS, "max_message_bytes": 65536, "max_pipelined_calls": 128,
               "message_timeout": "$MESSAGE_TIMEOUT"},
    "rss_kib": {"start": $rss_start, "peak_quiet": $hwm_quiet, "peak_abused": $hwm_abused, "end": $rss_end},
    "peak_open_descriptors": $peak_open,
    "phases": {"quiet": quiet, "abused": abused, "after": after},
    "abusers_saw": abusers,
    "log_lines": {"connection_limit": $(logcount "connection limit reached"),
                  "message_timeout": $(logcount "message not completed within message_timeout"),
                  "oversized": $(logcount "closing connection:") - $(logcount "message not completed within message_timeout")},
    "daemon_alive": "$alive" == "true",
}
json.dump(report, open(out, "w"), indent=2)
print(f"{'phase':<10} {'req/s':>10} {'p50 µs':>9} {'p99 µs':>9} {'errors':>7} {'peak RSS':>10}")
for name, r, hwm in (("quiet", quiet, $hwm_quiet), ("abused", abused, $hwm_abused), ("after", after, None)):
    print(f"{name:<10} {r.get('requests_per_sec', 0):>10.0f} {r.get('p50_us', 0):>9.0f} {r.get('p99_us', 0):>9.0f} "
          f"{r.get('errors', 0) + r.get('io_failures', 0):>7} {(str(hwm // 1024) + ' MiB') if hwm else '':>10}")
print(f"RSS start {$rss_start // 1024} MiB, end {$rss_end // 1024} MiB; peak open descriptors {$peak_open}; daemon alive: {'$alive'}")
print("abusers saw:", json.dumps(abusers))
print("limit log lines:", json.dumps(report["log_lines"]))
print("written to", out)
EOF

#!/usr/bin/env bash
# bench/audit.sh - what the audit trail costs on the socket path: the same tokend binary twice,
# one with `[audit] enabled = true` and one with it off, answering ProvideTokenReplacement for one
# cached credential to bench/.bin/loadgen, on a persistent connection and with a connection per
# call, and to one-shot `tokenctl token` processes (a process per call, as credential helpers
# and scripts call it), the two daemons alternated in short runs (which goes first alternates too). Prints a
# table and writes bench/results/audit-<stamp>.json.
#
# The ratio on/off is the median of each round's ratio, not the ratio of medians: a VM's speed
# drifts by a factor of two or more within minutes here, and only runs made next to each other
# see the same machine.
#
#   bench/audit.sh                      # 20 rounds of 30,000 persistent, 2,000 per-call, 200 one-shot calls
#   ROUNDS=3 N=20000 NCPR=1000 NONESHOT=50 bench/audit.sh
#
# Environment: TOKEND_BIN, TOKENCTL_BIN (default: .build-release/dist), RESULTS_DIR.
# Bounded: ROUNDS x 4 runs of N or NCPR calls, each run under a 120 s timeout.
set -euo pipefail
BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_DIR=$(dirname "$BENCH_DIR")
BIN=${TOKEND_BIN:-$REPO_DIR/.build-release/dist/tokend}
CTL=${TOKENCTL_BIN:-$REPO_DIR/.build-release/dist/tokenctl}
LOADGEN=$BENCH_DIR/.bin/loadgen
ROUNDS=${ROUNDS:-20}
N=${N:-30000}
NCPR=${NCPR:-2000}
NONESHOT=${NONESHOT:-200}
export NONESHOT
RESULTS_DIR=${RESULTS_DIR:-$BENCH_DIR/results}
mkdir -p "$RESULTS_DIR"
for tool in "$BIN" "$CTL" "$LOADGEN"; do
    [ -x "$tool" ] || { echo "bench/audit.sh: $tool is missing (bench/run builds it)" >&2; exit 1; }
done

WORK=$(mktemp -d)
trap 'for p in "$WORK"/*/pid; do [ -f "$p" ] && kill "$(cat "$p")" 2>/dev/null; done; rm -rf "$WORK"' EXIT
token=$(head -c 600 /dev/urandom | tr -dc A-Za-z0-9 | head -c 40)
printf '{"access_token":"%s","refresh_token":"r%s","expires_in":86400,"token_type":"Bearer"}' "$token" "$token" >"$WORK/token.json"
printf '{"method":"io.tokend.TokenProvider.ProvideTokenReplacement","parameters":{"userIdentifier":"bench-user"}}' >"$WORK/request.json"

start() { # name enabled
    local dir=$WORK/$1
    mkdir -p "$dir/state"
    chmod 700 "$dir/state"
    cat >"$dir/tokend.toml" <<EOF
[daemon]
socket = "tokend.sock"
state_directory = "state"
key_file = "state/tokend.key"
max_connections = 4096
[providers.bench]
kind = "oauth2"
token_endpoint = "http://127.0.0.1:9/token"
client_id = "bench"
client_auth = "none"
[audit]
enabled = $2
EOF
    # Records go to standard error (no journal here): a file, as a journal would take them.
    "$BIN" --config "$dir/tokend.toml" >"$dir/log" 2>&1 &
    echo $! >"$dir/pid"
    for _ in $(seq 200); do [ -S "$dir/tokend.sock" ] && break; sleep 0.05; done
    "$CTL" add bench-user --socket "$dir/tokend.sock" --provider bench <"$WORK/token.json" >/dev/null
}
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

start on true
start off false
ticks=$(getconf CLK_TCK)
echo "round,audit,row,requests_per_sec,p50_us,p99_us,cpu_us_per_call" >"$WORK/rows.csv"
for round in $(seq "$ROUNDS"); do
    order="on off"
    [ $((round % 2)) = 0 ] && order="off on"
    for audit in $order; do
        pid=$(cat "$WORK/$audit/pid")
        for row in persistent per-call one-shot; do
            if [ "$row" = one-shot ]; then
                before=$(cpu_ticks "$pid")
                start_ns=$(date +%s%N)
                for _ in $(seq "$NONESHOT"); do
                    "$CTL" --socket "$WORK/$audit/tokend.sock" token bench-user >/dev/null
                done
                end_ns=$(date +%s%N)
                after=$(cpu_ticks "$pid")
                python3 -c "
import sys
n, s, e, b, a, t = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5]), float(sys.argv[6])
mean = (e - s) / 1e3 / n
print(f'$round,$audit,one-shot,{n / ((e - s) / 1e9):.0f},{mean:.1f},{mean:.1f},{(a - b) / t * 1e6 / n:.1f}')
" "$NONESHOT" "$start_ns" "$end_ns" "$before" "$after" "$ticks" >>"$WORK/rows.csv"
                continue
            fi
            if [ "$row" = persistent ]; then
                args=(--connections 1 --requests "$N" --warmup 500)
                calls=$N
            else
                args=(--connections 1 --requests "$NCPR" --connection-per-request)
                calls=$NCPR
            fi
            before=$(cpu_ticks "$pid")
            out=$(timeout 120 "$LOADGEN" --socket "$WORK/$audit/tokend.sock" "${args[@]}" --message-file "$WORK/request.json" \
                --json --quiet --expect-substring "$token")
            after=$(cpu_ticks "$pid")
            python3 - "$round" "$audit" "$row" "$before" "$after" "$ticks" "$calls" "$out" >>"$WORK/rows.csv" <<'EOF'
import json, sys
round_, audit, row, before, after, ticks, calls, out = sys.argv[1:]
d = json.loads(out)
assert d["errors"] == 0 and d["mismatches"] == 0 and d["io_failures"] == 0, d
cpu = (float(after) - float(before)) / float(ticks) * 1e6 / int(calls)
print(f"{round_},{audit},{row},{d['requests_per_sec']:.0f},{d['p50_us']:.1f},{d['p99_us']:.1f},{cpu:.1f}")
EOF
        done
    done
done
records=$(grep -c "token released" "$WORK/on/log" || true)
stray=$(grep -c "token released" "$WORK/off/log" || true)
python3 - "$WORK/rows.csv" "$RESULTS_DIR" "$records" "$stray" "$ROUNDS" "$N" "$NCPR" <<'EOF'
import csv, json, statistics, sys, time, os
path, results, records, stray, rounds, n, ncpr = sys.argv[1:]
rows = list(csv.DictReader(open(path)))
table = {}
for row in ("persistent", "per-call", "one-shot"):
    entry = {}
    for audit in ("off", "on"):
        mine = [r for r in rows if r["row"] == row and r["audit"] == audit]
        for key in ("requests_per_sec", "p50_us", "p99_us", "cpu_us_per_call"):
            entry[f"{audit}_{key}"] = statistics.median(float(r[key]) for r in mine)
    def ratios(key):
        pairs = {}
        for r in rows:
            if r["row"] == row:
                pairs.setdefault(r["round"], {})[r["audit"]] = float(r[key])
        return [p["on"] / p["off"] for p in pairs.values() if p.get("off")]
    entry["on_over_off_requests_per_sec"] = statistics.median(ratios("requests_per_sec"))
    entry["on_over_off_cpu_us_per_call"] = statistics.median(ratios("cpu_us_per_call"))
    table[row] = entry
print("| connection | off req/s | on req/s | on / off req/s | off CPU µs/call | on CPU µs/call | on / off CPU | off p50 / p99 µs | on p50 / p99 µs |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
for row, e in table.items():
    print(f"| {row} | {e['off_requests_per_sec']:,.0f} | {e['on_requests_per_sec']:,.0f} | {e['on_over_off_requests_per_sec']:.2f} | "
          f"{e['off_cpu_us_per_call']:.1f} | {e['on_cpu_us_per_call']:.1f} | {e['on_over_off_cpu_us_per_call']:.2f} | "
          f"{e['off_p50_us']:.1f} / {e['off_p99_us']:.1f} | {e['on_p50_us']:.1f} / {e['on_p99_us']:.1f} |")
print(f"records written with the trail on: {records} (off: {stray}); medians of {rounds} rounds, ratios paired by round;")
print("one-shot: a tokenctl process per call, its p50 / p99 columns the mean wall time per call")
stamp = time.strftime("%Y%m%d-%H%M%S")
out = {"kind": "audit", "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "load_average": os.getloadavg(),
       "rounds": int(rounds), "persistent_calls": int(n), "per_call_calls": int(ncpr), "one_shot_calls": int(os.environ.get("NONESHOT", "200")), "table": table,
       "records_on": int(records), "records_off": int(stray), "rows": rows}
json.dump(out, open(f"{results}/audit-{stamp}.json", "w"), indent=1)
EOF

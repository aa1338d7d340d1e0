#!/usr/bin/env bash
# socket-bench.sh - tokend vs. a do-nothing Unix-socket "floor", same message sizes.
#
#   bench/socket-bench.sh                 # needs release tokend + tokenctl
#   bench/socket-bench.sh --floor-only    # an echo server stands in for tokend
#   bench/socket-bench.sh --help
#
# It builds only the C tools (make -C bench); it never builds Swift.
# Every run is bounded (requests, duration, loadgen's hard caps, `timeout`) and
# everything the script starts is stopped on exit (trap EXIT).
set -euo pipefail

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_DIR=$(dirname "$BENCH_DIR")
BIN="$BENCH_DIR/.bin"

# ------------------------------------------------------------------ settings
TOKEND_BIN=${TOKEND_BIN:-$REPO_DIR/.build-release/dist/tokend}
TOKENCTL_BIN=${TOKENCTL_BIN:-$REPO_DIR/.build-release/dist/tokenctl}
TOKEND_DEV_BIN=${TOKEND_DEV_BIN:-}     # a second tokend (e.g. `swift build -c release`) in the same run
CONNECTIONS=${CONNECTIONS:-"1 2 64"}   # persistent-connection rows
REQUESTS=${REQUESTS:-200000}           # per run, total over all connections ...
DURATION=${DURATION:-10}               # ... or this many seconds, whichever first
WARMUP=${WARMUP:-200}                  # unrecorded requests per connection before each run
REPEAT=${REPEAT:-3}                    # runs per cell; the median (by req/s) is shown
CPR_CONNECTIONS=${CPR_CONNECTIONS:-1}  # connection-per-request row
CPR_REQUESTS=${CPR_REQUESTS:-20000}
PIN_CPU=${PIN_CPU:-0}                  # CPU for the pinned 1-connection row
FLOOR_MODE=${FLOOR_MODE:-thread}       # echo_server model for persistent rows
FLOOR_CPR_MODE=${FLOOR_CPR_MODE:-epoll} # echo_server model for the connection-per-request row
FLOOR_ONLY=${FLOOR_ONLY:-0}
REPLY_BYTES=${REPLY_BYTES:-}           # floor-only: reply size of the stand-in (default 100)
STAND_IN_SERVER=${STAND_IN_SERVER:-}   # floor-only: the stand-in's program (default the C echo server)
RESULTS_DIR=${RESULTS_DIR:-$BENCH_DIR/results}
KEEP_TMP=${KEEP_TMP:-0}
DO_PIN=${DO_PIN:-1}
DO_CPR=${DO_CPR:-1}
CALL=${CALL:-token}                    # token: ProvideTokenReplacement; dpop: ProvideDPoPProof
READER=${READER:-}                     # the credential's reader (tokenctl add --reader); default the uid

usage() {
    cat <<EOF
usage: $0 [options]
  --floor-only            no tokend: a second echo server stands in for it (tests this script);
                          with --stand-in PATH, that program does (it takes echo_server's
                          options), e.g. Benchmarks/.build-bench/release/nio-floor, SwiftNIO's floor
  --stand-in PATH         floor-only: the stand-in's program (env STAND_IN_SERVER)
  --connections "1 2 64"  persistent-connection rows               (env CONNECTIONS)
  --requests N            requests per run (default $REQUESTS)      (env REQUESTS)
  --duration S            max seconds per run (default $DURATION)   (env DURATION)
  --repeat K              runs per cell, median shown (default $REPEAT) (env REPEAT)
  --warmup N              warm-up requests per connection (default $WARMUP)
  --cpr-requests N        requests for the connection-per-request row (default $CPR_REQUESTS)
  --no-pin                skip the pinned (taskset -c $PIN_CPU) 1-connection row
  --no-cpr                skip the connection-per-request row
  --reply-bytes N         floor-only: reply size of the stand-in (default 100)
  --results-dir DIR       where socket-<timestamp>.json goes (default bench/results)
  --keep-tmp              keep the temp dir (config, logs, raw results)
  --call token|dpop       what each request asks (default token): a cached token, or a DPoP
                          proof for a DPoP-bound credential (one P-256 signature per call);
                          dpop results go to dpop-socket-<timestamp>.json (env CALL)
  --dev-bin PATH          also measure this tokend (a development build: `swift build -c release`,
                          Swift runtime linked dynamically) in the same run, interleaved with the
                          shipped one and the floor; the table gains its columns (env TOKEND_DEV_BIN)
  --reader READER         the benchmark credential's reader instead of this uid (env READER);
                          LOADGEN in it is replaced by loadgen's path, LOADGEN_SHA256 by its
                          sha256, UID by this uid: --reader 'uid:UID+exe:LOADGEN@sha256:LOADGEN_SHA256'
                          measures a program-reader check (results go to reader-<prefix>-<timestamp>.json)
env: TOKEND_BIN, TOKENCTL_BIN (default .build-release/dist/{tokend,tokenctl}), FLOOR_MODE
     (thread|epoll, default thread), FLOOR_CPR_MODE (default epoll), PIN_CPU (default 0)
EOF
}

while [ $# -gt 0 ]; do
    case "$1" in
    --floor-only) FLOOR_ONLY=1 ;;
    --stand-in) STAND_IN_SERVER=$2; shift ;;
    --connections) CONNECTIONS=$2; shift ;;
    --requests) REQUESTS=$2; shift ;;
    --duration) DURATION=$2; shift ;;
    --repeat) REPEAT=$2; shift ;;
    --warmup) WARMUP=$2; shift ;;
    --cpr-requests) CPR_REQUESTS=$2; shift ;;
    --no-pin) DO_PIN=0 ;;
    --no-cpr) DO_CPR=0 ;;
    --reply-bytes) REPLY_BYTES=$2; shift ;;
    --results-dir) RESULTS_DIR=$2; shift ;;
    --keep-tmp) KEEP_TMP=1 ;;
    --call) CALL=$2; shift ;;
    --reader) READER=$2; shift ;;
    --dev-bin) TOKEND_DEV_BIN=$2; shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "socket-bench: unknown argument: $1" >&2; usage >&2; exit 1 ;;
    esac
    shift
done

case "$CALL" in
token) MESSAGE='{"method":"io.tokend.TokenProvider.ProvideTokenReplacement","parameters":{"userIdentifier":"bench-user"}}'
    TOKEN_TYPE=Bearer DPOP=false RESULT_PREFIX=socket ;;
dpop) MESSAGE='{"method":"io.tokend.TokenProvider.ProvideDPoPProof","parameters":{"userIdentifier":"bench-user","httpMethod":"GET","httpUri":"https://api.example.com/items?page=2"}}'
    TOKEN_TYPE=DPoP DPOP=true RESULT_PREFIX=dpop-socket ;;
*) echo "socket-bench: --call must be token or dpop, got '$CALL'" >&2; exit 1 ;;
esac
for v in REQUESTS DURATION REPEAT WARMUP CPR_REQUESTS CPR_CONNECTIONS PIN_CPU; do
    [[ ${!v} =~ ^[0-9]+$ ]] || { echo "socket-bench: $v must be a whole number, got '${!v}'" >&2; exit 1; }
done
[ "$REPEAT" -ge 1 ] && [ "$DURATION" -ge 1 ] && [ "$REQUESTS" -ge 1 ] || { echo "socket-bench: REPEAT, DURATION and REQUESTS must be >= 1" >&2; exit 1; }
for c in $CONNECTIONS; do [[ $c =~ ^[1-9][0-9]*$ ]] || { echo "socket-bench: bad connection count '$c'" >&2; exit 1; }; done

die() { echo "socket-bench: $*" >&2; exit 1; }
log() { echo "socket-bench: $*" >&2; }

# ------------------------------------------------------------- preconditions
if [ "$FLOOR_ONLY" != 1 ]; then
    [ -x "$TOKEND_BIN" ] || die "tokend binary not found or not executable: $TOKEND_BIN
  build it first (scripts/build-release) or set TOKEND_BIN=/path/to/tokend; or use --floor-only"
    [ -z "$TOKEND_DEV_BIN" ] || [ -x "$TOKEND_DEV_BIN" ] || die "--dev-bin: not an executable: $TOKEND_DEV_BIN"
    [ -x "$TOKENCTL_BIN" ] || die "tokenctl binary not found or not executable: $TOKENCTL_BIN
  build it first (scripts/build-release) or set TOKENCTL_BIN=/path/to/tokenctl; or use --floor-only"
fi
NCPU=$(nproc)
if [ "$DO_PIN" = 1 ] && [ "$PIN_CPU" -ge "$NCPU" ]; then die "PIN_CPU=$PIN_CPU but only $NCPU CPUs"; fi
if [ "$DO_PIN" = 1 ] && ! command -v taskset >/dev/null; then log "taskset not found (util-linux): skipping the pinned row"; DO_PIN=0; fi

make -s -C "$BENCH_DIR" >&2 || die "building the C tools failed"
LOADGEN="$BIN/loadgen"
ECHO_SERVER="$BIN/echo_server"
READER_ARGS=()
if [ -n "$READER" ]; then
    [ "$FLOOR_ONLY" != 1 ] || die "--reader needs tokend, not --floor-only"
    # /proc/PID/exe shows the path with symbolic links resolved: that is what an exe: reader names.
    loadgen_path=$(realpath "$LOADGEN")
    loadgen_sha256=$(sha256sum "$loadgen_path" | cut -d' ' -f1)
    READER=${READER//LOADGEN_SHA256/$loadgen_sha256}
    READER=${READER//LOADGEN/$loadgen_path}
    READER=${READER//UID/$(id -u)}
    READER_ARGS=(--reader "$READER")
    RESULT_PREFIX=reader-$RESULT_PREFIX
    log "the credential's reader: $READER"
fi
# A stand-in's results must not pass for tokend's (bench/run picks the newest socket-*.json).
[ "$FLOOR_ONLY" = 1 ] && RESULT_PREFIX=floor-only-$RESULT_PREFIX

# ------------------------------------------------------ temp dir and cleanup
TMP=$(mktemp -d "${TMPDIR:-/tmp}/tokend-bench.XXXXXX")
PIDS=()
cleanup() {
    local rc=$? pid i
    trap - EXIT INT TERM
    for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do
        for i in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    if [ "$KEEP_TMP" = 1 ]; then log "kept temp dir $TMP"; else rm -rf "$TMP"; fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

printf '%s\n' "$MESSAGE" >"$TMP/request.json"
RAW="$TMP/raw"
mkdir -p "$RAW"

# Upper bound for the whole script: servers get it as their own lifetime cap,
# so nothing outlives the script even if it is killed with SIGKILL.
NROWS=$(( $(wc -w <<<"$CONNECTIONS") + DO_PIN + DO_CPR + 1 ))
BUDGET=$(( NROWS * 3 * REPEAT * (DURATION + 45) + 300 ))

wait_for_socket() { # path pid seconds
    local i
    for i in $(seq $(( $3 * 10 ))); do
        [ -S "$1" ] && return 0
        kill -0 "$2" 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}

start_echo() { # name mode reply_bytes [program] -> sets ECHO_PID, socket at $TMP/name.sock
    "${4:-$ECHO_SERVER}" --quiet --mode "$2" --reply-bytes "$3" --max-seconds "$BUDGET" "$TMP/$1.sock" \
        >"$TMP/$1.log" 2>&1 &
    ECHO_PID=$!
    PIDS+=("$ECHO_PID")
    wait_for_socket "$TMP/$1.sock" "$ECHO_PID" 10 || { cat "$TMP/$1.log" >&2; die "echo server $1 did not start"; }
}

jfield() { # json key -> value (flat one-line JSON written by loadgen)
    sed -n "s/.*\"$2\":\"\{0,1\}\([^,\"}]*\).*/\1/p" <<<"$1"
}

cpu_busy_pct() { # busy % of all CPUs over 0.5 s, from /proc/stat
    local a b
    a=($(head -1 /proc/stat)); sleep 0.5; b=($(head -1 /proc/stat))
    local idle=$(( (b[4] + b[5]) - (a[4] + a[5]) )) total=0 i
    for i in 1 2 3 4 5 6 7 8; do total=$(( total + b[i] - a[i] )); done
    [ "$total" -gt 0 ] && echo $(( 100 * (total - idle) / total )) || echo 0
}

# start_tokend NAME BIN -> INSTANCE_SOCK, INSTANCE_PID: a tokend in $TMP/NAME holding the
# benchmark credential (the token in $TMP/token.json).
start_tokend() {
    local name=$1 bin=$2 dir="$TMP/$1" st
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
dpop = $DPOP
dpop_bind_on_refresh = true
EOF
    INSTANCE_SOCK="$dir/tokend.sock"
    # `timeout` is a last-resort lifetime cap; TERM to it is passed on to tokend.
    timeout --kill-after=10 "$BUDGET" "$bin" --config "$dir/tokend.toml" >"$dir/tokend.log" 2>&1 &
    local timeout_pid=$!
    PIDS+=("$timeout_pid")
    wait_for_socket "$INSTANCE_SOCK" "$timeout_pid" 30 || {
        if kill -0 "$timeout_pid" 2>/dev/null; then
            log "$name ($bin) did not create $INSTANCE_SOCK within 30 s; its log:"
        else
            st=0; wait "$timeout_pid" || st=$?
            log "$name ($bin) exited (status $st) before creating $INSTANCE_SOCK; its log:"
        fi
        cat "$dir/tokend.log" >&2
        exit 1
    }
    INSTANCE_PID=$(ps -o pid= --ppid "$timeout_pid" | head -1 | tr -d ' ')
    [ -n "$INSTANCE_PID" ] || INSTANCE_PID=$timeout_pid
    log "$name running (pid $INSTANCE_PID, $bin), socket $INSTANCE_SOCK"
    if ! timeout 30 "$TOKENCTL_BIN" add bench-user --socket "$INSTANCE_SOCK" --provider bench "${READER_ARGS[@]}" \
        <"$TMP/token.json" >"$dir/tokenctl.log" 2>&1; then
        log "tokenctl add failed:"; cat "$dir/tokenctl.log" >&2
        log "$name's log:"; tail -50 "$dir/tokend.log" >&2
        exit 1
    fi
}

# ---------------------------------------------------------------- the target
EXPECT=""
if [ "$FLOOR_ONLY" = 1 ]; then
    TARGET_NAME="stand-in"
    [ -z "$STAND_IN_SERVER" ] || [ -x "$STAND_IN_SERVER" ] || die "--stand-in $STAND_IN_SERVER is not an executable"
    start_echo standin "$FLOOR_MODE" "${REPLY_BYTES:-100}" "$STAND_IN_SERVER"
    TARGET_SOCK="$TMP/standin.sock"
    TARGET_PID=$ECHO_PID
    start_echo standin-cpr "$FLOOR_CPR_MODE" "${REPLY_BYTES:-100}" "$STAND_IN_SERVER"
    TARGET_CPR_SOCK="$TMP/standin-cpr.sock"
    TARGET_CPR_PID=$ECHO_PID
    log "floor-only: ${STAND_IN_SERVER:-an echo server ($FLOOR_MODE / $FLOOR_CPR_MODE)} stands in for tokend"
else
    TARGET_NAME="tokend"
    rand=$(head -c 4096 /dev/urandom | LC_ALL=C tr -dc 'A-Za-z0-9')
    ACCESS_TOKEN=${rand:0:40}
    REFRESH_TOKEN=${rand:40:40}
    printf '{"access_token":"%s","refresh_token":"%s","expires_in":86400,"token_type":"%s"}' \
        "$ACCESS_TOKEN" "$REFRESH_TOKEN" "$TOKEN_TYPE" >"$TMP/token.json"
    start_tokend tokend "$TOKEND_BIN"
    TARGET_SOCK=$INSTANCE_SOCK TARGET_CPR_SOCK=$INSTANCE_SOCK TARGET_PID=$INSTANCE_PID TARGET_CPR_PID=$INSTANCE_PID
    if [ -n "$TOKEND_DEV_BIN" ]; then
        start_tokend dev "$TOKEND_DEV_BIN"
        DEV_SOCK=$INSTANCE_SOCK DEV_PID=$INSTANCE_PID
    fi
    EXPECT=$ACCESS_TOKEN
fi

# ------------------------------------------- probe: reply size and sanity
probe=$(timeout 30 "$LOADGEN" --socket "$TARGET_SOCK" --connections 1 --requests 1 --wait-ms 5000 \
    --message-file "$TMP/request.json" --json --quiet --print-reply 2>"$TMP/probe-reply.txt") || true
[ -n "$probe" ] || { cat "$TMP/probe-reply.txt" >&2; die "probe request to $TARGET_NAME failed"; }
if [ "$(jfield "$probe" errors)" != 0 ] || [ "$(jfield "$probe" requests)" != 1 ]; then
    log "probe request to $TARGET_NAME did not succeed:"; cat "$TMP/probe-reply.txt" >&2; echo "$probe" >&2
    [ -f "$TMP/tokend/tokend.log" ] && { log "tokend log:"; tail -50 "$TMP/tokend/tokend.log" >&2; }
    exit 1
fi
if [ -n "$EXPECT" ] && ! grep -qF "$EXPECT" "$TMP/probe-reply.txt"; then
    log "WARNING: the reply does not contain the access token that was added; not checking replies for it"
    sed 's/^/  /' "$TMP/probe-reply.txt" >&2
    EXPECT=""
fi
MEASURED_REPLY=$(jfield "$probe" reply_bytes)
REQUEST_BYTES=$(jfield "$probe" request_bytes)
log "$TARGET_NAME reply: $MEASURED_REPLY bytes (NUL included); request: $REQUEST_BYTES bytes"

# ------------------------------------------------------------------ the floor
start_echo floor "$FLOOR_MODE" "$MEASURED_REPLY"
FLOOR_SOCK="$TMP/floor.sock"; FLOOR_PID=$ECHO_PID
start_echo floor-cpr "$FLOOR_CPR_MODE" "$MEASURED_REPLY"
FLOOR_CPR_SOCK="$TMP/floor-cpr.sock"; FLOOR_CPR_PID=$ECHO_PID

# ------------------------------------------------------------------- running
# one_run target(tokend|dev|floor) row connections pinned(0|1) cpr(0|1) rep -> raw JSON file
one_run() {
    local target=$1 row=$2 conns=$3 pinned=$4 cpr=$5 rep=$6 sock pid out rc=0 reqs=$REQUESTS
    local args=() pre=()
    if [ "$target" = tokend ]; then
        if [ "$cpr" = 1 ]; then sock=$TARGET_CPR_SOCK; pid=$TARGET_CPR_PID; else sock=$TARGET_SOCK; pid=$TARGET_PID; fi
        [ -n "$EXPECT" ] && args+=(--expect-substring "$EXPECT")
    elif [ "$target" = dev ]; then
        sock=$DEV_SOCK; pid=$DEV_PID
        [ -n "$EXPECT" ] && args+=(--expect-substring "$EXPECT")
    else
        if [ "$cpr" = 1 ]; then sock=$FLOOR_CPR_SOCK; pid=$FLOOR_CPR_PID; else sock=$FLOOR_SOCK; pid=$FLOOR_PID; fi
    fi
    if [ "$cpr" = 1 ]; then args+=(--connection-per-request); reqs=$CPR_REQUESTS; fi
    local saved_mask=""
    if [ "$pinned" = 1 ]; then
        saved_mask=$(taskset -p "$pid" | awk '{print $NF}')
        taskset -a -p -c "$PIN_CPU" "$pid" >/dev/null
        pre=(taskset -c "$PIN_CPU")
    fi
    out="$RAW/$row.$target.$rep.json"
    timeout --kill-after=5 $(( DURATION + 40 )) "${pre[@]}" "$LOADGEN" --socket "$sock" \
        --connections "$conns" --requests "$reqs" --duration "$DURATION" --max-seconds "$DURATION" \
        --warmup "$WARMUP" --message-file "$TMP/request.json" --json --quiet \
        --label "$row/$target/$rep" "${args[@]}" >"$out" 2>"$out.err" || rc=$?
    if [ -n "$saved_mask" ]; then taskset -a -p "$saved_mask" "$pid" >/dev/null || true; fi
    if [ ! -s "$out" ]; then
        log "loadgen produced no result for $row/$target (exit $rc):"; cat "$out.err" >&2
        echo '{"requests":0,"errors":0,"requests_per_sec":0,"p50_us":0,"p99_us":0,"p999_us":0,"io_failures":1}' >"$out"
    fi
    [ "$rc" = 0 ] || { log "$row/$target/$rep: loadgen exit $rc"; sed 's/^/  /' "$out.err" >&2; }
    return 0
}

ROWS=()       # row ids
declare -A ROW_DESC ROW_CONNS ROW_PIN ROW_CPR
add_row() { ROWS+=("$1"); ROW_DESC[$1]=$2; ROW_CONNS[$1]=$3; ROW_PIN[$1]=$4; ROW_CPR[$1]=$5; }
for c in $CONNECTIONS; do add_row "persistent-c$c" "persistent" "$c" 0 0; done
[ "$DO_PIN" = 1 ] && add_row "pinned-c1" "pinned cpu$PIN_CPU" 1 1 0
[ "$DO_CPR" = 1 ] && add_row "cpr-c$CPR_CONNECTIONS" "conn-per-req" "$CPR_CONNECTIONS" 0 1

TARGETS="tokend floor"
[ -n "$TOKEND_DEV_BIN" ] && TARGETS="tokend dev floor"
BUSY_BEFORE=$(cpu_busy_pct)
[ "$BUSY_BEFORE" -gt 10 ] && log "WARNING: the CPUs are ${BUSY_BEFORE}% busy before the benchmark; numbers will be noisy"
START_TS=$(date -u +%Y-%m-%dT%H:%M:%SZ)
for row in "${ROWS[@]}"; do
    for rep in $(seq "$REPEAT"); do
        for target in $TARGETS; do # interleaved so all see the same conditions
            log "run $row $target #$rep"
            one_run "$target" "$row" "${ROW_CONNS[$row]}" "${ROW_PIN[$row]}" "${ROW_CPR[$row]}" "$rep"
        done
    done
done
BUSY_AFTER=$(cpu_busy_pct)

# ------------------------------------------------------------------- report
median_file() { # row target -> the raw file whose req/s is the median of the repeats
    local f
    for f in "$RAW/$1.$2".*.json; do printf '%s %s\n' "$(jfield "$(cat "$f")" requests_per_sec)" "$f"; done |
        sort -g | awk '{a[NR]=$2} END {print a[int((NR+1)/2)]}'
}

ANY_BAD=0
TABLE="$TMP/table.txt"
{
    printf '%-22s | %12s %8s %8s %8s | %12s %8s %8s %8s | %6s' "mode / connections" \
        "$TARGET_NAME r/s" "p50 us" "p99 us" "p99.9 us" "floor r/s" "p50 us" "p99 us" "p99.9 us" "ratio"
    [ -n "$TOKEND_DEV_BIN" ] && printf ' | %12s %8s %6s' "dev r/s" "p99 us" "ratio"
    printf '\n%s' "-----------------------+--------------------------------------------------+-------------------------------------------+-------"
    [ -n "$TOKEND_DEV_BIN" ] && printf '%s' "+-----------------------------"
    printf '\n'
} >"$TABLE"
ROWS_JSON=""
for row in "${ROWS[@]}"; do
    tf=$(median_file "$row" tokend); ff=$(median_file "$row" floor)
    tj=$(cat "$tf"); fj=$(cat "$ff")
    t_rps=$(jfield "$tj" requests_per_sec); f_rps=$(jfield "$fj" requests_per_sec)
    ratio=$(awk -v a="$t_rps" -v b="$f_rps" 'BEGIN { if (b > 0) printf "%.3f", a / b; else print "0" }')
    flag=""
    for f in "$RAW/$row".*.json; do
        j=$(cat "$f")
        if [ "$(jfield "$j" errors)" != 0 ] || [ "$(jfield "$j" io_failures)" != 0 ] ||
            [ "$(jfield "$j" mismatches)" != 0 ]; then flag=" !"; ANY_BAD=1; fi
    done
    printf '%-22s | %12.0f %8.1f %8.1f %8.1f | %12.0f %8.1f %8.1f %8.1f | %6s' \
        "${ROW_DESC[$row]} / ${ROW_CONNS[$row]}" "$t_rps" "$(jfield "$tj" p50_us)" "$(jfield "$tj" p99_us)" \
        "$(jfield "$tj" p999_us)" "$f_rps" "$(jfield "$fj" p50_us)" "$(jfield "$fj" p99_us)" "$(jfield "$fj" p999_us)" \
        "$ratio" >>"$TABLE"
    DEV_JSON=""
    if [ -n "$TOKEND_DEV_BIN" ]; then
        df=$(median_file "$row" dev); dj=$(cat "$df")
        d_rps=$(jfield "$dj" requests_per_sec)
        d_ratio=$(awk -v a="$d_rps" -v b="$f_rps" 'BEGIN { if (b > 0) printf "%.3f", a / b; else print "0" }')
        printf ' | %12.0f %8.1f %6s' "$d_rps" "$(jfield "$dj" p99_us)" "$d_ratio" >>"$TABLE"
        reps_d=$(for f in "$RAW/$row".dev.*.json; do cat "$f"; done | paste -sd, -)
        DEV_JSON=",\"dev_ratio_rps\":$d_ratio,\"dev\":$dj,\"dev_runs\":[$reps_d]"
    fi
    printf '%s\n' "$flag" >>"$TABLE"
    reps_t=$(for f in "$RAW/$row".tokend.*.json; do cat "$f"; done | paste -sd, -)
    reps_f=$(for f in "$RAW/$row".floor.*.json; do cat "$f"; done | paste -sd, -)
    ROWS_JSON+="${ROWS_JSON:+,}{\"row\":\"$row\",\"mode\":\"${ROW_DESC[$row]}\",\"connections\":${ROW_CONNS[$row]},"
    ROWS_JSON+="\"pinned\":$([ "${ROW_PIN[$row]}" = 1 ] && echo true || echo false),"
    ROWS_JSON+="\"connection_per_request\":$([ "${ROW_CPR[$row]}" = 1 ] && echo true || echo false),"
    ROWS_JSON+="\"ratio_rps\":$ratio,\"tokend\":$tj,\"floor\":$fj,\"tokend_runs\":[$reps_t],\"floor_runs\":[$reps_f]$DEV_JSON}"
done

mkdir -p "$RESULTS_DIR"
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
OUT="$RESULTS_DIR/$RESULT_PREFIX-$STAMP.json"
json_str() { printf '"%s"' "$(printf '%s' "$1" | sed 's/\\/\\\\/g; s/"/\\"/g' | tr -d '\n')"; }
{
    printf '{"kind":"tokend-socket-bench","call":"%s","started":"%s","finished":"%s",' "$CALL" "$START_TS" "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    printf '"floor_only":%s,"target":"%s",' "$([ "$FLOOR_ONLY" = 1 ] && echo true || echo false)" "$TARGET_NAME"
    printf '"tokend_bin":%s,' "$([ "$FLOOR_ONLY" = 1 ] && echo null || json_str "$TOKEND_BIN")"
    printf '"tokend_dev_bin":%s,' "$([ -n "$TOKEND_DEV_BIN" ] && json_str "$TOKEND_DEV_BIN" || echo null)"
    printf '"reader":%s,' "$([ -n "$READER" ] && json_str "$READER" || echo '"uid (default)"')"
    printf '"request_bytes":%s,"reply_bytes":%s,' "$REQUEST_BYTES" "$MEASURED_REPLY"
    printf '"settings":{"requests":%s,"duration_s":%s,"repeat":%s,"warmup_per_connection":%s,"cpr_requests":%s,"pin_cpu":%s,"floor_mode":"%s","floor_cpr_mode":"%s","reply_checked_for_token":%s},' \
        "$REQUESTS" "$DURATION" "$REPEAT" "$WARMUP" "$CPR_REQUESTS" "$PIN_CPU" "$FLOOR_MODE" "$FLOOR_CPR_MODE" \
        "$([ -n "$EXPECT" ] && echo true || echo false)"
    printf '"host":{"cpus":%s,"kernel":%s,"cpu_model":%s,"cpu_busy_pct_before":%s,"cpu_busy_pct_after":%s},' \
        "$NCPU" "$(json_str "$(uname -sr)")" \
        "$(json_str "$(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)")" "$BUSY_BEFORE" "$BUSY_AFTER"
    printf '"rows":[%s]}\n' "$ROWS_JSON"
} >"$OUT"

echo
echo "tokend socket benchmark ($TARGET_NAME vs floor), request $REQUEST_BYTES B, reply $MEASURED_REPLY B, $NCPU CPUs," \
    "median of $REPEAT, <= $REQUESTS requests or ${DURATION}s per run"
echo "the credential's reader: ${READER:-this uid (default)}"
cat "$TABLE"
echo "ratio = $TARGET_NAME req/s / floor req/s (1.0 = as fast as a server that does nothing)"
[ -n "$TOKEND_DEV_BIN" ] && echo "$TARGET_NAME: $TOKEND_BIN; dev: $TOKEND_DEV_BIN (ratio also to the floor)"
[ "$ANY_BAD" = 1 ] && echo "! = some run had error replies, mismatched replies or transport failures (see the JSON)"
echo "results: $OUT"
[ "$ANY_BAD" = 1 ] && exit 3
exit 0

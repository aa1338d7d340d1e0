#!/usr/bin/env bash
# What refresh coordination through the shared PostgreSQL store costs: the database work of one
# add and one grant with and without its lease, and coordinated grants per second from three
# nodes; once with each node's floors durable in its state directory (as tokend runs), once with
# them in memory only (what durability costs).
# Starts its own PostgreSQL 15 (Debian's package, as the postgres user) on 127.0.0.1; bounded
# (about 40 s of measuring). Prints two tables and writes bench/results/shared-store.json and
# bench/results/shared-store-floors-in-memory.json.
# Run as root (PostgreSQL is started through setpriv as the postgres user), ideally under nice.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p bench/results
swift build --build-tests >/dev/null 2>&1
TOKEND_BENCH=1 TOKEND_BENCH_OUT="$(pwd)/bench/results/shared-store.json" \
  timeout 300 swift test --skip-build --filter SharedStoreBenchmark 2>&1 \
  | sed -n '/^shared store benchmark/,/^lease requests refused/p'
echo "wrote bench/results/shared-store.json and bench/results/shared-store-floors-in-memory.json"

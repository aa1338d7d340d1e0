#!/usr/bin/env bash
# What refresh coordination through the shared PostgreSQL store costs: the database work of one
# grant with and without its lease, and coordinated grants per second from three nodes.
# Starts its own PostgreSQL 15 (Debian's package, as the postgres user) on 127.0.0.1; bounded
# (about 20 s of measuring). Prints a table and writes bench/results/shared-store.json.
# Run as root (PostgreSQL is started through setpriv as the postgres user), ideally under nice.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p bench/results
swift build --build-tests >/dev/null 2>&1
TOKEND_BENCH=1 TOKEND_BENCH_OUT="$(pwd)/bench/results/shared-store.json" \
  timeout 300 swift test --skip-build --filter SharedStoreBenchmark 2>&1 \
  | sed -n '/^shared store benchmark/,/^lease requests refused/p'
echo "wrote bench/results/shared-store.json"

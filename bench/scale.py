#!/usr/bin/env python3
"""Scale benchmark: tokend over 10k, 100k and 1M stored credentials.

For each size and token kind (40-byte opaque tokens, 1 KiB JWTs) it
  1. makes the store once with tokend-storegen (cached in bench/.data/, reused by later runs),
  2. starts tokend and times start -> first answered GetInfo (READY),
  3. reads RSS when ready, asks for every credential once (pipelined ProvideTokenReplacement,
     every reply checked), reads RSS again,
  4. measures tokend's CPU time while idle for --idle seconds,
  5. times Status for one user (--status-one calls) and for all users (streamed, --status-all calls).

    bench/scale.py [--sizes 10000,100000,1000000] [--kinds opaque,jwt] [--idle 30] [--quick]

Needs release tokend (TOKEND_BIN) and tokend-storegen (STOREGEN_BIN); see bench/README.md.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "lib"))
from tokendbench import (BENCH_DIR, Processes, Varlink, ask_everyone, distribution_ms, loadavg, log, peak_rss_mib, proc_cpu_seconds,
                         rss_mib, storegen_bin, tokend_bin, wait_ready, write_config, write_result)

KINDS = {"opaque": ["--token-bytes", "40"], "jwt": ["--jwt-bytes", "1024"]}
PROVIDER = """[providers.bench]
kind = "oauth2"
token_endpoint = "http://127.0.0.1:9/token"
client_id = "bench"
client_auth = "none"
"""
TARGETS = {"ready_s": 3.0, "rss_mib": 1024.0, "idle_cpu_pct": 0.5}


def make_store(size, kind, data_dir):
    """The cached store for (size, kind); generated on first use. Returns (state_dir, key_file, gen seconds or None)."""
    base = data_dir / f"scale-{kind}-{size}"
    state, key = base / "state", base / "tokend.key"
    marker = base / "complete"
    if marker.exists():
        return state, key, None
    if base.exists():
        shutil.rmtree(base)
    state.mkdir(parents=True)
    os.chmod(base, 0o700)
    os.chmod(state, 0o700)
    log(f"generating {size} {kind} credentials in {base}")
    start = time.monotonic()
    subprocess.run([str(storegen_bin()), "--state-dir", str(state), "--key-file", str(key), "--count", str(size),
                    "--reader", f"uid:{os.getuid()}", *KINDS[kind]], check=True, timeout=1800, stdout=subprocess.DEVNULL)
    seconds = time.monotonic() - start
    marker.write_text(json.dumps({"size": size, "kind": kind, "seconds": seconds}))
    return state, key, seconds


def status_latencies(sock, size, one_calls, all_calls):
    width = len(str(size - 1))
    c = Varlink(sock, timeout=600)
    one = []
    for i in range(one_calls):
        t = time.monotonic()
        r = c.call("io.tokend.TokenProvider.Status", {"userIdentifier": f"user-{(i * 7919) % size:0{width}d}"})
        one.append(time.monotonic() - t)
        assert "error" not in r, r
    every, reply_bytes, seen = [], 0, 0
    for _ in range(all_calls):
        t = time.monotonic()
        replies, reply_bytes = c.call_streamed("io.tokend.TokenProvider.Status", {})
        every.append(time.monotonic() - t)
        seen = sum(len(r.get("parameters", {}).get("credentials", [])) for r in replies)
        if seen != size:
            log(f"Status listed {seen} credentials, expected {size}")
    c.close()
    if not every:
        every = [0.0]
    return {"one_user": distribution_ms(one), "all_users": distribution_ms(every),
            "all_users_reply_mib": round(reply_bytes / 2**20, 1), "all_users_listed": seen}


def run_one(size, kind, args, procs):
    state, key, gen_s = make_store(size, kind, args.data_dir)
    tmp = Path(tempfile.mkdtemp(prefix="tokend-scale."))
    try:
        cfg = write_config(tmp, state, key, PROVIDER)
        sock = tmp / "tokend.sock"
        load_before = loadavg()
        p = procs.start([str(tokend_bin()), "--config", str(cfg)], tmp / "tokend.log")
        ready_s = wait_ready(sock, p, timeout=300)
        rss_ready, hwm_ready = rss_mib(p.pid), peak_rss_mib(p.pid)
        cpu_at_ready = proc_cpu_seconds(p.pid)
        log(f"{kind} {size}: ready in {ready_s:.3f} s, RSS {rss_ready:.0f} MiB (peak {hwm_ready:.0f})")
        ask_s, ask_errors = ask_everyone(sock, size, args.window)
        rss_asked = rss_mib(p.pid)
        log(f"{kind} {size}: asked everyone in {ask_s:.2f} s ({size / ask_s:.0f}/s), {ask_errors} errors, RSS {rss_asked:.0f} MiB")
        time.sleep(1)  # let the last replies' buffers go
        cpu0, t0 = proc_cpu_seconds(p.pid), time.monotonic()
        time.sleep(args.idle)
        idle_cpu = proc_cpu_seconds(p.pid) - cpu0
        idle_pct = 100 * idle_cpu / (time.monotonic() - t0)
        log(f"{kind} {size}: idle CPU {idle_pct:.3f} % over {args.idle} s")
        status = status_latencies(sock, size, args.status_one, min(1, args.status_all) if size >= 1_000_000 else args.status_all)
        log(f"{kind} {size}: Status one p50 {status['one_user']['p50_ms']} ms, all p50 {status['all_users']['p50_ms']} ms")
        hwm = peak_rss_mib(p.pid)
        procs.stop(p)
        return {
            "size": size, "token_kind": kind, "store_generation_s": gen_s,
            "ready_s": round(ready_s, 3), "cpu_s_until_ready": round(cpu_at_ready, 3),
            "rss_ready_mib": round(rss_ready, 1), "peak_rss_at_ready_mib": round(hwm_ready, 1),
            "ask_everyone_s": round(ask_s, 3), "ask_everyone_per_s": round(size / ask_s), "ask_errors": ask_errors,
            "rss_after_asking_everyone_mib": round(rss_asked, 1),
            "idle_cpu_pct": round(idle_pct, 4), "idle_seconds": args.idle, "idle_cpu_s": round(idle_cpu, 3),
            "status": status, "peak_rss_mib": round(hwm, 1), "loadavg_before": load_before, "loadavg_after": loadavg(),
            "targets_met": size != 1_000_000 or kind != "opaque" or (
                ready_s < TARGETS["ready_s"] and max(rss_ready, rss_asked) < TARGETS["rss_mib"]
                and idle_pct < TARGETS["idle_cpu_pct"] and ask_errors == 0),
        }
    finally:
        if not args.keep_tmp:
            shutil.rmtree(tmp, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10000,100000,1000000")
    ap.add_argument("--kinds", default="opaque,jwt")
    ap.add_argument("--idle", type=int, default=30, help="seconds of idle CPU measurement")
    ap.add_argument("--status-one", type=int, default=200)
    ap.add_argument("--status-all", type=int, default=3)
    ap.add_argument("--window", type=int, default=512, help="pipelined calls in flight while asking everyone")
    ap.add_argument("--data-dir", type=Path, default=BENCH_DIR / ".data")
    ap.add_argument("--quick", action="store_true", help="10k and 100k only, opaque and jwt, 5 s idle")
    ap.add_argument("--keep-tmp", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.sizes, args.idle, args.status_one = "10000,100000", 5, 50
    sizes = [int(s) for s in args.sizes.split(",")]
    kinds = args.kinds.split(",")
    for s in sizes:
        if not 1 <= s <= 10_000_000:
            sys.exit(f"scale: bad size {s}")
    for k in kinds:
        if k not in KINDS:
            sys.exit(f"scale: unknown kind {k}")
    for path in (tokend_bin(), storegen_bin()):
        if not os.access(path, os.X_OK):
            sys.exit(f"scale: {path} not found; see bench/README.md (bench/run builds it)")
    args.data_dir.mkdir(parents=True, exist_ok=True)
    procs = Processes()
    rows = []
    try:
        for kind in kinds:
            for size in sizes:
                rows.append(run_one(size, kind, args, procs))
    finally:
        procs.stop_all()
    out = write_result("scale", {"tokend_bin": str(tokend_bin()), "targets_1m_opaque": TARGETS, "rows": rows})
    print(f"{'kind':6} {'creds':>8} | {'ready s':>8} {'RSS MiB':>8} {'RSS all':>8} {'1st ask/s':>9} {'idle %':>7} | "
          f"{'Status 1 p50/p99 ms':>20} {'Status all ms':>13}")
    for r in rows:
        s = r["status"]
        print(f"{r['token_kind']:6} {r['size']:>8} | {r['ready_s']:>8.3f} {r['rss_ready_mib']:>8.0f} "
              f"{r['rss_after_asking_everyone_mib']:>8.0f} {r['ask_everyone_per_s']:>9} {r['idle_cpu_pct']:>7.3f} | "
              f"{s['one_user']['p50_ms']:>9.3f}/{s['one_user']['p99_ms']:<10.3f} {s['all_users']['p50_ms']:>13.1f}")
    print(f"targets (1M opaque): ready < {TARGETS['ready_s']} s, RSS < {TARGETS['rss_mib']:.0f} MiB, idle CPU < {TARGETS['idle_cpu_pct']} %")
    print(f"results: {out}")
    return 0 if all(r["ask_errors"] == 0 for r in rows) else 3


if __name__ == "__main__":
    sys.exit(main())

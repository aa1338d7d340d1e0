#!/usr/bin/env python3
"""Single flight: C concurrent callers (1,000) for one credential that must be refreshed.

The credential's token has 300 s left; every caller asks with minValidSeconds = 600, so none
can be served the stored token and all of them need the same refresh. The callers connect
first, then all send at once (asyncio, one connection each). Reported: grants the IdP logged
(must be 1), replies, errors, and the latency distribution the callers saw.

    bench/singleflight.py [--callers 1000] [--workers 4]
"""
import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "lib"))
from tokendbench import (clean_up, Processes, distribution_ms, idp_provider_section, idp_token_posts, loadavg, log, mint,
                         start_idp, storegen_bin, tokend_bin, wait_ready, write_config, write_result)


async def callers(sock, count, timeout):
    request = json.dumps({"method": "io.tokend.TokenProvider.ProvideTokenReplacement",
                          "parameters": {"userIdentifier": "user-0", "minValidSeconds": 600}}).encode() + b"\0"
    conns = []
    for _ in range(count):
        conns.append(await asyncio.wait_for(asyncio.open_unix_connection(str(sock), limit=1 << 20), 10))
    go = asyncio.Event()
    latencies, errors, tokens = [], [], set()

    async def one(reader, writer):
        await go.wait()
        t = time.monotonic()
        writer.write(request)
        await writer.drain()
        raw = await asyncio.wait_for(reader.readuntil(b"\0"), timeout)
        latencies.append(time.monotonic() - t)
        reply = json.loads(raw[:-1])
        if "error" in reply:
            errors.append(reply)
        else:
            tokens.add(reply["parameters"]["credentials"]["accessToken"])
        writer.close()

    tasks = [asyncio.create_task(one(r, w)) for r, w in conns]
    await asyncio.sleep(0.2)
    go.set()
    await asyncio.wait_for(asyncio.gather(*tasks), timeout + 10)
    return latencies, errors, len(tokens)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--callers", type=int, default=1000)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--keep-tmp", action="store_true")
    args = ap.parse_args()
    if not 1 <= args.callers <= 4000:
        sys.exit("singleflight: --callers must be 1…4000 (tokend's max_connections here is 4096)")
    tmp = Path(tempfile.mkdtemp(prefix="tokend-singleflight."))
    os.chmod(tmp, 0o700)
    procs = Processes()
    try:
        (tmp / "idp").mkdir()
        mint(tmp / "idp", 1, 300, tmp / "tokens.jsonl")
        idp, idp_port, idp_state = start_idp(procs, tmp, workers=args.workers)
        state = tmp / "state"
        state.mkdir(mode=0o700)
        subprocess.run([str(storegen_bin()), "--state-dir", str(state), "--key-file", str(tmp / "tokend.key"),
                        "--count", "1", "--provider", "idp", "--tokens-file", str(tmp / "tokens.jsonl"),
                        "--expires-in", "300", "--reader", f"uid:{os.getuid()}"],
                       check=True, timeout=120, stdout=subprocess.DEVNULL)
        provider = idp_provider_section(tmp, f"http://127.0.0.1:{idp_port}/o/token/")
        cfg = write_config(tmp, state, tmp / "tokend.key", provider)
        p = procs.start([str(tokend_bin()), "--config", str(cfg)], tmp / "tokend.log")
        wait_ready(tmp / "tokend.sock", p, timeout=60)
        before = idp_token_posts(idp_state)
        load_before = loadavg()
        start = time.monotonic()
        latencies, errors, distinct = asyncio.run(callers(tmp / "tokend.sock", args.callers, 60))
        wall = time.monotonic() - start
        time.sleep(1)  # the access log line is written after the response
        grants = idp_token_posts(idp_state) - before
        row = {"callers": args.callers, "grants": grants, "replies": len(latencies), "errors": len(errors),
               "distinct_tokens_served": distinct, "wall_s": round(wall, 3), "latency": distribution_ms(latencies),
               "first_error": errors[0] if errors else None, "loadavg_before": load_before, "loadavg_after": loadavg()}
        row["targets_met"] = grants == 1 and not errors and len(latencies) == args.callers
        out = write_result("singleflight", {"tokend_bin": str(tokend_bin()), "row": row})
        lat = row["latency"]
        print(f"single flight: {args.callers} concurrent callers, one credential due: {grants} grant(s) at the IdP,"
              f" {len(latencies)} replies, {len(errors)} errors, {distinct} distinct token(s)")
        print(f"  latency ms: min {lat['min_ms']} p50 {lat['p50_ms']} p90 {lat['p90_ms']} p99 {lat['p99_ms']}"
              f" max {lat['max_ms']}")
        print(f"results: {out}")
        return 0 if row["targets_met"] else 3
    finally:
        clean_up(procs, tmp, args.keep_tmp)


if __name__ == "__main__":
    sys.exit(main())

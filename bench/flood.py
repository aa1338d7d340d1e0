#!/usr/bin/env python3
"""A connection flood against tokend's socket, bounded in count and time.

    flood.py --socket PATH --connections N --seconds S

Keeps N connections in flight for S seconds (at most 600): each client connects, stays idle,
and connects again at once whenever the daemon closes it (a connection refused by a limit gets
QuotaExceeded and is closed) or the connect fails (a full accept queue). Run as a user who is not
an administrator, this is one local user holding thousands of connections. Prints one JSON
object: connections opened, closed by the daemon, connects that failed. Stdlib only.
"""
import argparse
import asyncio
import json
import time


async def client(path, stop, stats):
    while time.monotonic() < stop:
        try:
            reader, writer = await asyncio.open_unix_connection(path)
        except OSError:
            stats["connect_failed"] += 1
            await asyncio.sleep(0.001)
            continue
        stats["opened"] += 1
        try:
            data = await asyncio.wait_for(reader.read(1 << 16), max(0.0, stop - time.monotonic()))
            while data:
                data = await asyncio.wait_for(reader.read(1 << 16), max(0.0, stop - time.monotonic()))
            stats["closed_by_daemon"] += 1
        except (asyncio.TimeoutError, OSError):
            pass
        writer.close()


async def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--socket", required=True)
    p.add_argument("--connections", type=int, default=3000)
    p.add_argument("--seconds", type=float, required=True)
    a = p.parse_args()
    stop = time.monotonic() + min(a.seconds, 600)
    stats = {"opened": 0, "closed_by_daemon": 0, "connect_failed": 0}
    tasks = [asyncio.create_task(client(a.socket, stop, stats)) for _ in range(min(a.connections, 20000))]
    await asyncio.wait(tasks, timeout=min(a.seconds, 600) + 15)
    print(json.dumps(stats))


if __name__ == "__main__":
    asyncio.run(main())

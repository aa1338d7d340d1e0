#!/usr/bin/env python3
"""Hostile clients for tokend's socket (issue 8, point 4), bounded in count and time.

    abuse.py --socket PATH --seconds S [--idle N] [--slowloris N] [--non-readers N]
             [--oversized N] [--deep N] [--bad-utf8 N] [--max-message BYTES]

Runs, all at once for S seconds:
  idle         N connections opened and left silent (thousands)
  slowloris    N clients sending a valid call one byte per second (reconnecting when dropped)
  non-readers  N clients pipelining calls and never reading a reply
  oversized    N clients sending messages larger than --max-message, ~20 per second each
  deep         N clients sending deeply nested JSON just under the size limit, ~20/s each
  bad-utf8     N clients sending calls with invalid UTF-8, ~20/s each
Prints one JSON object with what happened (connections refused, slowloris drops, bytes the
daemon accepted from non-readers, ...). Stdlib only; stops by itself after S seconds.
"""
import argparse
import asyncio
import json
import socket
import time

CALL = b'{"method":"org.varlink.service.GetInfo"}'
BIG_REPLY_CALL = b'{"method":"org.varlink.service.GetInterfaceDescription","parameters":{"interface":"io.tokend.TokenProvider"}}'


class Stats(dict):
    def add(self, key, n=1):
        self[key] = self.get(key, 0) + n


async def connect(path, stats):
    try:
        reader, writer = await asyncio.open_unix_connection(path, limit=1 << 20)
        stats.add("connections_opened")
        return reader, writer
    except OSError:
        stats.add("connect_failed")
        return None


async def closed_by_daemon(reader, timeout):
    """True when the daemon closed the connection (EOF) within timeout."""
    try:
        while True:
            data = await asyncio.wait_for(reader.read(1 << 16), timeout)
            if not data:
                return True
    except (asyncio.TimeoutError, ConnectionError):
        return False


async def idle(path, stop, stats):
    conn = await connect(path, stats)
    if conn is None:
        return
    reader, writer = conn
    if await closed_by_daemon(reader, max(0.0, stop - time.monotonic())):
        stats.add("idle_closed_by_daemon")  # e.g. refused beyond max_connections
    writer.close()


async def slowloris(path, stop, stats):
    while time.monotonic() < stop:
        conn = await connect(path, stats)
        if conn is None:
            await asyncio.sleep(1)
            continue
        reader, writer = conn
        dropped = False
        for byte in CALL:  # never the NUL: the message is never finished
            if time.monotonic() >= stop:
                break
            try:
                writer.write(bytes([byte]))
                await writer.drain()
            except ConnectionError:
                dropped = True
                break
            if await closed_by_daemon(reader, 1.0):
                dropped = True
                break
        if dropped:
            stats.add("slowloris_dropped")
        writer.close()


async def non_reader(path, stop, stats):
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
        stats.add("connections_opened")
    except OSError:
        stats.add("connect_failed")
        sock.close()
        return
    sock.setblocking(False)
    message = BIG_REPLY_CALL + b"\0"
    sent = 0
    while time.monotonic() < stop:
        try:
            sent += sock.send(message * 16)
        except BlockingIOError:
            await asyncio.sleep(0.1)  # the daemon stopped reading from us
        except OSError:
            stats.add("non_reader_closed_by_daemon")
            break
    stats.add("non_reader_bytes_accepted", sent)
    sock.close()


async def flood(path, stop, stats, name, make):
    """Sends make() every 50 ms, reconnecting whenever the daemon closes the connection."""
    conn = None
    while time.monotonic() < stop:
        if conn is None:
            conn = await connect(path, stats)
            if conn is None:
                await asyncio.sleep(0.2)
                continue
        reader, writer = conn
        try:
            writer.write(make())
            await writer.drain()
            stats.add(name + "_sent")
            # Read whatever came back (errors), without waiting long.
            try:
                data = await asyncio.wait_for(reader.read(1 << 16), 0.05)
                if not data:
                    stats.add(name + "_closed_by_daemon")
                    writer.close()
                    conn = None
                elif b"InvalidMessage" in data:
                    stats.add(name + "_invalid_message_replies", data.count(b"InvalidMessage"))
            except asyncio.TimeoutError:
                pass
        except ConnectionError:
            stats.add(name + "_closed_by_daemon")
            conn = None
        await asyncio.sleep(0.05)
    if conn is not None:
        conn[1].close()


async def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--socket", required=True)
    p.add_argument("--seconds", type=float, required=True)
    p.add_argument("--idle", type=int, default=3000)
    p.add_argument("--slowloris", type=int, default=50)
    p.add_argument("--non-readers", type=int, default=20)
    p.add_argument("--oversized", type=int, default=5)
    p.add_argument("--deep", type=int, default=5)
    p.add_argument("--bad-utf8", type=int, default=5)
    p.add_argument("--max-message", type=int, default=65536)
    a = p.parse_args()
    a.seconds = min(a.seconds, 600)  # bounded whatever is asked
    stop = time.monotonic() + a.seconds
    stats = Stats()
    oversized = b"[" * (a.max_message * 2) + b"\0"
    deep = b"[" * (a.max_message - 64) + b"\0"
    bad = b'{"method":"io.tokend.TokenProvider.Status","parameters":{"userIdentifier":"\xc3\x28\xff"}}\0'
    tasks = []
    for _ in range(a.idle):
        tasks.append(asyncio.create_task(idle(a.socket, stop, stats)))
        if len(tasks) % 200 == 0:
            await asyncio.sleep(0.01)  # do not flood the accept queue all at once
    tasks += [asyncio.create_task(slowloris(a.socket, stop, stats)) for _ in range(a.slowloris)]
    tasks += [asyncio.create_task(non_reader(a.socket, stop, stats)) for _ in range(a.non_readers)]
    tasks += [asyncio.create_task(flood(a.socket, stop, stats, "oversized", lambda: oversized)) for _ in range(a.oversized)]
    tasks += [asyncio.create_task(flood(a.socket, stop, stats, "deep", lambda: deep)) for _ in range(a.deep)]
    tasks += [asyncio.create_task(flood(a.socket, stop, stats, "bad_utf8", lambda: bad)) for _ in range(a.bad_utf8)]
    await asyncio.wait(tasks, timeout=a.seconds + 15)
    print(json.dumps(dict(sorted(stats.items()))))


if __name__ == "__main__":
    asyncio.run(main())

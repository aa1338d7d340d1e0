"""Holds many idle connections to tokend's socket for SocketAbuseTests, from a process of its own.

    idle_connections.py SOCKET COUNT

Opens COUNT connections, then sends org.varlink.service.GetInfo on every 100th and reads its
reply, prints one JSON line {"opened": N, "probed": K, "errors": [...]}, and keeps every
connection open until its standard input is closed.

Why a separate process: the test process itself must not hold thousands of descriptors while
other tests start child processes. swift-corelibs-foundation's Process.run reads /proc/self/fd
with an over-read of each entry (swiftlang/swift-corelibs-foundation#5472, not fixed in Swift
6.3.1); once the directory listing fills glibc's 32 KiB buffer (~1,365 descriptors), that
over-read can fall off the end of a mapping and crash the test run.
"""
import json
import socket
import sys

GET_INFO = b'{"method":"org.varlink.service.GetInfo"}\0'


def main():
    path, count = sys.argv[1], int(sys.argv[2])
    connections = []
    for _ in range(count):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(path)  # blocking: waits while the listen backlog is full
        s.settimeout(10)
        connections.append(s)
    errors = []
    probed = 0
    for index in range(0, count, 100):
        s = connections[index]
        s.sendall(GET_INFO)
        reply = b""
        while not reply.endswith(b"\0"):
            chunk = s.recv(65536)
            if not chunk:
                errors.append(f"connection {index} closed")
                break
            reply += chunk
        else:
            if b'"error"' in reply:
                errors.append(f"connection {index}: {reply[:200]!r}")
        probed += 1
    print(json.dumps({"opened": len(connections), "probed": probed, "errors": errors}), flush=True)
    sys.stdin.read()  # until the test closes our stdin


if __name__ == "__main__":
    main()

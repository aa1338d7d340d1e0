#!/usr/bin/env python3
"""Fault-injecting HTTP/1.1 reverse proxy for tokend tests (stdlib only).

    faultproxy.py --listen 0 --upstream 8443 [--upstream-tls] [--mode hang]
                  [--token-path /o/token/] [--tls-cert F --tls-key F]

Listens on 127.0.0.1:LISTEN (0 = any free port), forwards to 127.0.0.1:UPSTREAM
and prints `READY <port>` once listening. SIGTERM/SIGINT stop it (exit 0).

Control is on the same port; these paths are never forwarded:
  POST /__fault        set the fault, JSON body, e.g.
                       {"mode": "status:503", "retry_after": 2, "times": 1, "path": "/o/token/"}
                         mode         see below (default "pass")
                         retry_after  Retry-After header for status:* modes
                         times        apply to the next N matching requests, then back to pass
                         path         only requests whose path starts with this (default: all)
  GET  /__fault        the current fault
  GET  /__stats        {"requests", "token_posts", "inflight", "max_inflight", "faults_applied",
                        "dpop_nonces"} (token_posts/inflight count POSTs to --token-path only;
                        dpop_nonces: the nonce claim of each such POST's DPoP proof, null if none,
                        the last 50; no proof, no entry)
  POST /__stats/reset  zero the counters
Modes:
  pass             forward unchanged
  hang             read the request, never answer (until the client closes)
  hold             hold every matching request until the fault is set to something else, then
                   handle it under that fault (benchmarks: let requests queue, then release them)
  status:NNN       answer NNN with an OAuth-style JSON error, e.g. status:503, status:429
  malformed_json   200 application/json with a truncated JSON body
  no_access_token  200 {"token_type":"Bearer"}
  html             500 text/html page
  reset            forward (so the IdP DOES process the grant), send the response
                   head and half the body, then close with a TCP RST
  slow:SECONDS     wait SECONDS, then forward
  close            read the request, then drop the connection (RST) without any answer
  truncated        200 with a Content-Length larger than the body sent, then close
  jwt_access:SUB   forward, then replace the access_token of a 200 answer with an unsigned
                   JWT whose sub is SUB (iat now, exp in an hour, or the fault's "exp_offset"
                   seconds from now, or at the fault's "exp_at"): "a token for another user"
                   when SUB is not the credential's subject, "an expired token" with a
                   negative exp_offset, "tokens that never get fresher" with a fixed exp_at
  expires_in       forward, then set the expires_in of a 200 answer to the fault's "expires_in"
                   value as given (0, -5, "3600", 10**13, ...), or remove it when the fault has none
  echo_refresh_token  400 invalid_grant whose error_description quotes the request's
                   refresh_token (a server that echoes secrets into its errors)
  dpop_nonce       400 {"error": "use_dpop_nonce"} with a new DPoP-Nonce header every time (RFC 9449 §8):
                   with "times": 1 a server that wants a nonce once, without it one that refuses
                   even proofs carrying the nonce it just gave; dpop_nonce:none sends no DPoP-Nonce
  stand_in[:SECONDS]  answer token POSTs itself (after SECONDS): 200 with fresh random access and refresh
                   tokens, expires_in 3600 (benchmarks only: tokend's cost per grant when the
                   token endpoint is not the bottleneck)
  stand_in_queue:SECONDS  stand_in, answering one POST at a time, each after SECONDS (a busy
                   server's pace: answers arrive one by one)

Bounded: request head <= 64 KiB, request body <= 1 MiB (no chunked requests),
responses are streamed in 64 KiB pieces, at most 256 client connections.
"""
import argparse
import asyncio
import base64
import json
import signal
import secrets
import socket
import ssl
import struct
import sys
import time
import urllib.parse

MAX_HEAD, MAX_BODY, MAX_CONNS, CHUNK = 64 * 1024, 1024 * 1024, 256, 64 * 1024
HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "te", "trailer", "upgrade"}
REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 413: "Payload Too Large", 429: "Too Many Requests",
           431: "Request Header Fields Too Large", 500: "Internal Server Error", 501: "Not Implemented",
           502: "Bad Gateway", 503: "Service Unavailable", 504: "Gateway Timeout"}



def proof_nonce(proof):
    """The nonce claim of a DPoP proof (not verified: the proxy only reports what was sent)."""
    try:
        claims = proof.split(".")[1]
        return json.loads(base64.urlsafe_b64decode(claims + "=" * (-len(claims) % 4))).get("nonce")
    except (IndexError, ValueError):
        return "<not a JWT>"

class HTTPError(Exception):
    def __init__(self, status):
        self.status = status


async def read_head(reader):
    """Return (start_line, [(name, value)]) or None at a clean EOF."""
    try:
        raw = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as e:
        if e.partial.strip():
            raise HTTPError(400)
        return None
    except asyncio.LimitOverrunError:
        raise HTTPError(431)
    lines = raw.decode("latin-1").split("\r\n")[:-2]
    headers = []
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep:
            raise HTTPError(400)
        headers.append((name.strip(), value.strip()))
    return lines[0], headers


def header(headers, name):
    return next((v for k, v in headers if k.lower() == name), None)


class Proxy:
    def __init__(self, args):
        self.args = args
        self.fault = {"mode": args.mode}
        self.conns = self.inflight = 0
        self.queue = None  # stand_in_queue: one answer at a time, created on the loop
        self.reset_stats()

    def reset_stats(self):
        # inflight lives outside: a reset must not forget requests still in flight.
        self.stats = {"requests": 0, "token_posts": 0, "max_inflight": self.inflight, "faults_applied": 0,
                      "dpop_nonces": []}

    def snapshot(self):
        return dict(self.stats, inflight=self.inflight)

    async def handle(self, reader, writer):
        if self.conns >= MAX_CONNS:
            writer.close()
            return
        self.conns += 1
        try:
            while await self.one_request(reader, writer):
                pass
        except HTTPError as e:
            await self.respond(writer, e.status, {"error": "invalid_request"}, keep=False)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.TimeoutError, ssl.SSLError):
            pass
        finally:
            self.conns -= 1
            writer.close()

    async def one_request(self, reader, writer):
        """Serve one request; return True to keep the connection open."""
        head = await read_head(reader)
        if head is None:
            return False
        start, headers = head
        try:
            method, target, version = start.split(" ")
        except ValueError:
            raise HTTPError(400)
        if header(headers, "transfer-encoding"):
            raise HTTPError(501)
        length = int(header(headers, "content-length") or 0)
        if length > MAX_BODY:
            raise HTTPError(413)
        body = await reader.readexactly(length)
        keep = (header(headers, "connection") or "").lower() != "close" and version == "HTTP/1.1"
        path = target.split("?")[0]

        if path.startswith("/__"):
            return await self.control(writer, method, path, body, keep)

        self.stats["requests"] += 1
        counted = method == "POST" and path == self.args.token_path
        if counted:
            self.stats["token_posts"] += 1
            proof = header(headers, "dpop")
            if proof:
                self.stats["dpop_nonces"] = (self.stats["dpop_nonces"] + [proof_nonce(proof)])[-50:]
            self.inflight += 1
            self.stats["max_inflight"] = max(self.stats["max_inflight"], self.inflight)
        try:
            return await self.serve(reader, writer, method, target, version, headers, body, path, keep)
        finally:
            if counted:
                self.inflight -= 1

    def take_fault(self, path):
        f = self.fault
        if f.get("mode", "pass") == "pass" or not path.startswith(f.get("path", "")):
            return {"mode": "pass"}
        self.stats["faults_applied"] += 1
        if "times" in f:
            f["times"] -= 1
            if f["times"] <= 0:
                self.fault = {"mode": "pass"}
        return f

    async def serve(self, reader, writer, method, target, version, headers, body, path, keep):
        f = self.take_fault(path)
        for _ in range(20 * 600):  # bounded: at most 10 minutes
            if f["mode"] != "hold":
                break
            await asyncio.sleep(0.05)
            f = self.take_fault(path) if self.fault.get("mode") != "hold" else f
        mode, _, arg = f["mode"].partition(":")
        if mode == "pass":
            return await self.forward(writer, method, target, headers, body, keep)
        if mode == "slow":
            await asyncio.sleep(float(arg))
            return await self.forward(writer, method, target, headers, body, keep)
        if mode == "hang":
            while await reader.read(CHUNK):  # discard until the client gives up
                pass
            return False
        if mode == "reset":
            await self.forward(writer, method, target, headers, body, keep, cut=True)
            return False
        if mode == "status":
            status = int(arg)
            extra = [("Retry-After", str(f["retry_after"]))] if "retry_after" in f else []
            error = {429: "slow_down", 503: "temporarily_unavailable"}.get(status, "server_error")
            return await self.respond(writer, status, {"error": error, "error_description": f"faultproxy {status}"},
                                      keep, extra)
        if mode == "dpop_nonce":
            nonce = [] if arg == "none" else [("DPoP-Nonce", secrets.token_urlsafe(12))]
            return await self.respond(writer, 400, {"error": "use_dpop_nonce", "error_description": "faultproxy wants a nonce"},
                                      keep, nonce)
        if mode == "malformed_json":
            return await self.respond(writer, 200, b'{"access_token": "AbC123", "token_type": "Bea', keep)
        if mode == "no_access_token":
            return await self.respond(writer, 200, {"token_type": "Bearer"}, keep)
        if mode == "close":
            sock = writer.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()
            return False
        if mode == "truncated":
            part = b'{"access_token": "TrUnC4t3d", "token_type": "Bearer", "expires_in": 3600'
            head = ["HTTP/1.1 200 OK", "Content-Type: application/json", f"Content-Length: {len(part) + 200}",
                    "Cache-Control: no-store", "Connection: close"]
            writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + part)
            await writer.drain()
            return False
        if mode == "stand_in_queue":
            # One answer at a time, each taking SECONDS: a busy server's pace, answers one by one.
            self.queue = self.queue or asyncio.Lock()
            async with self.queue:
                await asyncio.sleep(float(arg or 0))
            mode, arg = "stand_in", ""
        if mode == "stand_in":
            if arg:
                await asyncio.sleep(float(arg))
            return await self.respond(writer, 200, {"access_token": secrets.token_urlsafe(30), "token_type": "Bearer",
                                                    "expires_in": 3600, "refresh_token": secrets.token_urlsafe(30)}, keep)
        if mode == "echo_refresh_token":
            form = urllib.parse.parse_qs(body.decode("latin-1"))
            token = (form.get("refresh_token") or [""])[0]
            return await self.respond(writer, 400, {"error": "invalid_grant",
                                                    "error_description": f"refresh token {token} is not valid"}, keep)
        if mode == "jwt_access":
            status, payload = await self.fetch(method, target, headers, body)
            if status == 200:
                payload = json.loads(payload)
                exp = int(f["exp_at"]) if "exp_at" in f else int(time.time()) + int(f.get("exp_offset", 3600))
                payload["access_token"] = unsigned_jwt({"sub": arg, "iat": int(time.time()), "exp": exp})
            return await self.respond(writer, status, payload if status == 200 else payload, keep)
        if mode == "expires_in":
            status, payload = await self.fetch(method, target, headers, body)
            if status == 200:
                payload = json.loads(payload)
                payload.pop("expires_in", None)
                if "expires_in" in f:
                    payload["expires_in"] = f["expires_in"]
                payload = json.dumps(payload).encode()
            return await self.respond(writer, status, payload, keep)
        if mode == "html":
            page = b"<!DOCTYPE html><html><body><h1>Internal Server Error</h1><p>faultproxy</p></body></html>\n"
            return await self.respond(writer, 500, page, keep, ctype="text/html; charset=utf-8")
        return await self.respond(writer, 500, {"error": "server_error", "error_description": f"bad mode {mode}"}, keep)

    async def control(self, writer, method, path, body, keep):
        if path == "/__fault" and method == "POST":
            try:
                f = json.loads(body or b"{}")
                f.setdefault("mode", "pass")
                if not isinstance(f["mode"], str):
                    raise ValueError
            except ValueError:
                return await self.respond(writer, 400, {"error": "body must be a JSON object with a string mode"}, keep)
            self.fault = f
            return await self.respond(writer, 200, self.fault, keep)
        if path == "/__fault":
            return await self.respond(writer, 200, self.fault, keep)
        if path == "/__stats/reset" and method == "POST":
            self.reset_stats()
            return await self.respond(writer, 200, self.snapshot(), keep)
        if path == "/__stats":
            return await self.respond(writer, 200, self.snapshot(), keep)
        return await self.respond(writer, 404, {"error": "not_found"}, keep)

    async def respond(self, writer, status, body, keep, extra=(), ctype="application/json"):
        if not isinstance(body, bytes):
            body = json.dumps(body).encode()
        head = [f"HTTP/1.1 {status} {REASONS.get(status, 'Status')}", f"Content-Type: {ctype}",
                f"Content-Length: {len(body)}", "Cache-Control: no-store",
                f"Connection: {'keep-alive' if keep else 'close'}"] + [f"{k}: {v}" for k, v in extra]
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body)
        await writer.drain()
        return keep

    async def fetch(self, method, target, headers, body):
        """One request upstream; returns (status, body bytes). Needs a Content-Length answer."""
        a = self.args
        ctx = None
        if a.upstream_tls:
            ctx = ssl.create_default_context()
            ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
        up_r, up_w = await asyncio.wait_for(
            asyncio.open_connection("127.0.0.1", a.upstream, ssl=ctx, limit=MAX_HEAD), 10)
        try:
            out = [f"{method} {target} HTTP/1.1"] + [f"{k}: {v}" for k, v in headers if k.lower() not in HOP_BY_HOP]
            out.append("Connection: close")
            up_w.write(("\r\n".join(out) + "\r\n\r\n").encode("latin-1") + body)
            await up_w.drain()
            status_line, rh = await asyncio.wait_for(read_head(up_r), a.upstream_timeout)
            length = min(int(header(rh, "content-length") or 0), MAX_BODY)
            data = await asyncio.wait_for(up_r.readexactly(length), a.upstream_timeout)
            return int(status_line.split(" ")[1]), data
        finally:
            up_w.close()

    async def forward(self, writer, method, target, headers, body, keep, cut=False):
        a = self.args
        ctx = None
        if a.upstream_tls:
            ctx = ssl.create_default_context()
            ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE  # test upstream, self-signed
        try:
            up_r, up_w = await asyncio.wait_for(
                asyncio.open_connection("127.0.0.1", a.upstream, ssl=ctx, limit=MAX_HEAD), 10)
        except (OSError, asyncio.TimeoutError):
            return await self.respond(writer, 502, {"error": "bad_gateway"}, keep)
        try:
            out = [f"{method} {target} HTTP/1.1"] + [f"{k}: {v}" for k, v in headers if k.lower() not in HOP_BY_HOP]
            out.append("Connection: close")  # one upstream connection per request
            up_w.write(("\r\n".join(out) + "\r\n\r\n").encode("latin-1") + body)
            await up_w.drain()
            head = await asyncio.wait_for(read_head(up_r), a.upstream_timeout)
            if head is None:
                return await self.respond(writer, 502, {"error": "bad_gateway"}, keep)
            status_line, rh = head
            status = int(status_line.split(" ")[1])
            length = header(rh, "content-length")
            if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
                remaining = 0
            elif length is not None:
                remaining = int(length)
            else:  # chunked or read-to-EOF: relay raw bytes, then close the client side
                remaining, keep = None, False
            resp = [status_line] + [f"{k}: {v}" for k, v in rh if k.lower() not in ("connection", "keep-alive")]
            resp.append(f"Connection: {'keep-alive' if keep else 'close'}")
            writer.write(("\r\n".join(resp) + "\r\n\r\n").encode("latin-1"))
            if cut:
                data = await up_r.read(max(1, (remaining or 2) // 2))
                writer.write(data[: max(1, len(data) // 2)] if remaining is None else data)
                await writer.drain()
                await asyncio.sleep(0.1)  # let the loop flush it (TLS encrypts on a later turn)
                sock = writer.get_extra_info("socket")
                if sock is not None:  # linger 0: close() sends RST instead of FIN
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                writer.transport.abort()
                return False
            while remaining is None or remaining > 0:
                data = await asyncio.wait_for(up_r.read(CHUNK if remaining is None else min(CHUNK, remaining)),
                                              a.upstream_timeout)
                if not data:
                    if remaining:
                        return False  # upstream died mid-body; drop the client too
                    break
                if remaining is not None:
                    remaining -= len(data)
                writer.write(data)
                await writer.drain()
            return keep
        finally:
            up_w.close()


def unsigned_jwt(claims):
    def b64(data):
        return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()
    return f"{b64({'alg': 'none', 'typ': 'JWT'})}.{b64(claims)}.c2ln"


async def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--listen", type=int, required=True, help="0 = any free port")
    p.add_argument("--upstream", type=int, required=True)
    p.add_argument("--upstream-tls", action="store_true", help="upstream speaks TLS (not verified)")
    p.add_argument("--upstream-timeout", type=float, default=60)
    p.add_argument("--token-path", default="/o/token/")
    p.add_argument("--mode", default="pass", help="initial fault mode")
    p.add_argument("--tls-cert")
    p.add_argument("--tls-key")
    args = p.parse_args()

    ctx = None
    if args.tls_cert:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(args.tls_cert, args.tls_key)
    proxy = Proxy(args)
    server = await asyncio.start_server(proxy.handle, "127.0.0.1", args.listen, ssl=ctx, limit=MAX_HEAD)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    print(f"READY {server.sockets[0].getsockname()[1]}", flush=True)
    await stop.wait()
    server.close()


if __name__ == "__main__":
    asyncio.run(main())
    sys.exit(0)

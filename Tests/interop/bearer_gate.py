#!/usr/bin/env python3
"""A resource server that accepts only access tokens the test IdP says are active (stdlib only).

    bearer_gate.py git  --introspect URL --repos DIR [--port N] [--log FILE]
    bearer_gate.py kube --introspect URL --tls-cert F --tls-key F [--port N] [--log FILE]

Binds 127.0.0.1 on port N (0, the default: a free one) and prints `READY <port>`. Every request's token is checked
with the IdP's RFC 7662 introspection endpoint (client tokend-test), so a token is accepted
exactly while the real IdP holds it valid — a refreshed-away token is refused.

  git   the token is the password of HTTP Basic auth (as git's credential helpers send it);
        accepted requests are served by `git http-backend` (CGI) from DIR, so the real git
        clones and fetches. Refused: 401 with `WWW-Authenticate: Basic`.
  kube  the token is a Bearer token (as kubectl sends an exec plugin's); `GET /api` answers a
        Kubernetes APIVersions object over HTTPS. Refused: 401 with a Kubernetes Status.

The log gets one line per request: `accepted` or `refused`, and the method and path (never
the token). SIGTERM stops it.
"""
import argparse
import base64
import http.server
import json
import os
import signal
import ssl
import subprocess
import sys
import threading
import urllib.parse
import urllib.request

CLIENT = ("tokend-test", "tokend-test-secret")


def active(introspect, token):
    if not token:
        return False
    body = urllib.parse.urlencode({"token": token}).encode()
    request = urllib.request.Request(introspect, data=body, method="POST")
    request.add_header("Authorization", "Basic " + base64.b64encode(f"{CLIENT[0]}:{CLIENT[1]}".encode()).decode())
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.load(response).get("active") is True


class Gate(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    args = None
    log_lock = threading.Lock()

    def log_message(self, *_):
        pass

    def record(self, outcome):
        if self.args.log:
            with self.log_lock, open(self.args.log, "a") as log:
                log.write(f"{outcome} {self.command} {self.path}\n")

    def token(self):
        header = self.headers.get("Authorization", "")
        scheme, _, value = header.partition(" ")
        if self.args.mode == "git" and scheme.lower() == "basic":
            try:
                return base64.b64decode(value).decode().partition(":")[2]
            except ValueError:
                return None
        if self.args.mode == "kube" and scheme.lower() == "bearer":
            return value.strip()
        return None

    def refuse(self):
        self.record("refused")
        if self.args.mode == "git":
            body = b"token refused\n"
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="tokend-test"')
            self.send_header("Content-Type", "text/plain")
        else:
            body = json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": "Unauthorized",
                               "reason": "Unauthorized", "code": 401}).encode()
            self.send_response(401)
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def handle_any(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        if not active(self.args.introspect, self.token()):
            return self.refuse()
        self.record("accepted")
        if self.args.mode == "kube":
            return self.kube()
        return self.git(body)

    def kube(self):
        if self.path.split("?")[0] != "/api":
            body, status = json.dumps({"kind": "Status", "status": "Failure", "code": 404}).encode(), 404
        else:
            body, status = json.dumps({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [
                {"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]}).encode(), 200
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def git(self, body):
        path, _, query = self.path.partition("?")
        environment = dict(os.environ, GIT_PROJECT_ROOT=self.args.repos, GIT_HTTP_EXPORT_ALL="1",
                           PATH_INFO=urllib.parse.unquote(path), QUERY_STRING=query, REQUEST_METHOD=self.command,
                           CONTENT_TYPE=self.headers.get("Content-Type", ""), CONTENT_LENGTH=str(len(body)),
                           REMOTE_USER="tokend", REMOTE_ADDR="127.0.0.1", GATEWAY_INTERFACE="CGI/1.1")
        result = subprocess.run(["git", "http-backend"], input=body, env=environment, capture_output=True, timeout=60)
        head, _, payload = result.stdout.partition(b"\r\n\r\n")
        if not _:
            head, _, payload = result.stdout.partition(b"\n\n")
        status, headers = 200, []
        for line in head.decode("latin-1").splitlines():
            name, _, value = line.partition(":")
            if name.lower() == "status":
                status = int(value.strip().split()[0])
            elif name:
                headers.append((name, value.strip()))
        self.send_response(status)
        for name, value in headers:
            if name.lower() != "content-length":
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = handle_any


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["git", "kube"])
    parser.add_argument("--introspect", required=True)
    parser.add_argument("--repos")
    parser.add_argument("--tls-cert")
    parser.add_argument("--tls-key")
    parser.add_argument("--log")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    Gate.args = args
    server = http.server.ThreadingHTTPServer(("127.0.0.1", args.port), Gate)
    server.daemon_threads = True
    if args.mode == "kube":
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(args.tls_cert, args.tls_key)
        server.socket = context.wrap_socket(server.socket, server_side=True)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    print(f"READY {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())

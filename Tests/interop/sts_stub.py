#!/usr/bin/env python3
"""A stand-in for Google's security token service: RFC 8693 token exchange (stdlib only).

    sts_stub.py --port N --log FILE

Binds 127.0.0.1:N. `POST /v1/token` with grant_type urn:ietf:params:oauth:grant-type:token-exchange
answers a new opaque access token for any subject token, and logs one line per exchange:
`exchange FINGERPRINT SUBJECT_TOKEN_TYPE AUDIENCE`, where FINGERPRINT is the first 16 hex digits of
the subject token's SHA-256 (never the token). Anything else gets 400 `invalid_request`.
"""
import argparse
import hashlib
import http.server
import json
import secrets
import signal
import sys
import threading
import urllib.parse

EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"


class STS(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    args = None
    log_lock = threading.Lock()

    def log_message(self, *_):
        pass

    def reply(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        form = urllib.parse.parse_qs(self.rfile.read(length).decode()) if length else {}
        value = lambda name: (form.get(name) or [""])[0]
        subject = value("subject_token")
        if self.path != "/v1/token" or value("grant_type") != EXCHANGE or not subject:
            return self.reply(400, {"error": "invalid_request"})
        with self.log_lock, open(self.args.log, "a") as log:
            fingerprint = hashlib.sha256(subject.encode()).hexdigest()[:16]
            log.write(f"exchange {fingerprint} {value('subject_token_type') or '-'} {value('audience') or '-'}\n")
        self.reply(200, {"access_token": "sts-" + secrets.token_urlsafe(24),
                         "issued_token_type": "urn:ietf:params:oauth:token-type:access_token",
                         "token_type": "Bearer", "expires_in": 3600})


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--log", required=True)
    STS.args = parser.parse_args()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", STS.args.port), STS)
    server.daemon_threads = True
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    print(f"READY {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())

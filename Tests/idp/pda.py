#!/usr/bin/env python3
"""A stand-in HAT PDA for tokend's tests, on 127.0.0.1 only.

A real PDA cannot run here. This one does what tokend relies on, with an RSA key it generates
at start:

  GET  /publickey                      the current key, PEM `PUBLIC KEY`
  GET  /users/access_token/validate    needs a valid token in X-Auth-Token; answers 200 with a
                                       renewed token (new iat and jti, same exp) in X-Auth-Token

and, for the test driving it (loopback only, like the server itself):

  POST /__mint     {"iat", "exp", "application", "iss", "sub", "alg"} -> {"token"}; alg is one
                   of RS256 (default), RS256-wrong-key, HS256-public-key, none, RS512
  POST /__rotate   a new signing key; /publickey serves it from now on
  POST /__renewal  {"mode": ok | 401 | 403 | 500 | bad-signature | wrong-iss | no-header | same-token}
  GET  /__stats    {"validate", "renewed", "publickey", "rejected"}

Prints `READY <port>` once listening (`--port 0` picks a free port); SIGTERM stops it.
"""

import argparse
import base64
import hashlib
import hmac
import json
import os
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def new_key():
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def public_pem(key) -> bytes:
    return key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


class PDA:
    def __init__(self, application, header):
        self.lock = threading.Lock()
        self.key = new_key()
        self.application = application
        self.header = header
        self.address = None  # set once the port is known
        self.renewal_mode = "ok"
        self.stats = {"validate": 0, "renewed": 0, "publickey": 0, "rejected": 0}

    def sign(self, header, claims, alg="RS256", key=None):
        signing_input = f"{b64(json.dumps(header).encode())}.{b64(json.dumps(claims).encode())}".encode()
        if alg == "none":
            return signing_input.decode() + "."
        if alg == "HS256-public-key":
            # The algorithm-confusion forgery: HMAC keyed with the PDA's public PEM.
            mac = hmac.new(public_pem(self.key), signing_input, hashlib.sha256).digest()
            return signing_input.decode() + "." + b64(mac)
        digest = hashes.SHA512() if alg == "RS512" else hashes.SHA256()
        signature = (key or self.key).sign(signing_input, padding.PKCS1v15(), digest)
        return signing_input.decode() + "." + b64(signature)

    def mint(self, spec):
        now = int(time.time())
        iat = int(spec.get("iat", now))
        claims = {
            "applicationVersion": "1.0.0",
            "sub": spec.get("sub", "1-standin-subject"),
            "application": spec.get("application", self.application),
            "iss": spec.get("iss", self.address),
            "exp": int(spec.get("exp", iat + 30 * 86400)),
            "iat": iat,
            "jti": os.urandom(16).hex(),
        }
        alg = spec.get("alg", "RS256")
        header_alg = {"RS256-wrong-key": "RS256", "HS256-public-key": "HS256"}.get(alg, alg)
        key = new_key() if alg == "RS256-wrong-key" else None
        return self.sign({"typ": "JWT", "alg": header_alg}, claims, alg, key)

    def check(self, token):
        """The claims of a token this PDA would accept now, else None."""
        try:
            head, payload, signature = token.split(".")
            header = json.loads(unb64(head))
            if header.get("alg") != "RS256":
                return None
            self.key.public_key().verify(unb64(signature), f"{head}.{payload}".encode(), padding.PKCS1v15(), hashes.SHA256())
            claims = json.loads(unb64(payload))
        except (ValueError, InvalidSignature):
            return None
        if claims.get("iss") != self.address or claims.get("exp", 0) <= time.time():
            return None
        return claims

    def renew(self, claims):
        """The renewed token: a new iat and jti, everything else (exp too) as it was."""
        renewed = dict(claims, iat=max(int(time.time()), claims["iat"] + 1), jti=os.urandom(16).hex())
        mode = self.renewal_mode
        if mode == "bad-signature":
            return self.sign({"typ": "JWT", "alg": "RS256"}, renewed, key=new_key())
        if mode == "wrong-iss":
            renewed["iss"] = "mallory.example"
        return self.sign({"typ": "JWT", "alg": "RS256"}, renewed)


def make_handler(pda):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass  # never log requests: they carry tokens

        def reply(self, status, body=b"", content_type="application/json", headers=()):
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            for name, value in headers:
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

        def reply_json(self, status, obj, headers=()):
            self.reply(status, json.dumps(obj).encode(), headers=headers)

        def body(self):
            length = int(self.headers.get("Content-Length") or 0)
            data = self.rfile.read(min(length, 1 << 20)) if length else b""
            return json.loads(data or b"{}")

        def do_GET(self):
            with pda.lock:
                if self.path == "/publickey":
                    pda.stats["publickey"] += 1
                    return self.reply(200, public_pem(pda.key), "text/plain")
                if self.path == "/users/access_token/validate":
                    pda.stats["validate"] += 1
                    claims = pda.check(self.headers.get(pda.header, ""))
                    if claims is None:
                        pda.stats["rejected"] += 1
                        return self.reply_json(401, {"error": "Not Authenticated", "message": "Not Authenticated"})
                    mode = pda.renewal_mode
                    if mode in ("401", "403", "500"):
                        return self.reply_json(int(mode), {"error": "fault", "message": f"stand-in fault {mode}"})
                    if mode == "no-header":
                        return self.reply_json(200, {"message": "Authenticated"})
                    token = self.headers.get(pda.header) if mode == "same-token" else pda.renew(claims)
                    pda.stats["renewed"] += 1
                    return self.reply_json(200, {"message": "Authenticated"}, headers=[(pda.header, token)])
                if self.path == "/__stats":
                    return self.reply_json(200, dict(pda.stats, address=pda.address))
            self.reply_json(404, {"error": "not found"})

        def do_POST(self):
            try:
                spec = self.body()
            except ValueError:
                return self.reply_json(400, {"error": "bad json"})
            with pda.lock:
                if self.path == "/__mint":
                    return self.reply_json(200, {"token": pda.mint(spec)})
                if self.path == "/__rotate":
                    pda.key = new_key()
                    return self.reply_json(200, {"rotated": True})
                if self.path == "/__renewal":
                    pda.renewal_mode = str(spec.get("mode", "ok"))
                    return self.reply_json(200, {"mode": pda.renewal_mode})
            self.reply_json(404, {"error": "not found"})

    return Handler


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--port", type=int, default=0, help="0 = any free port")
    p.add_argument("--application", default="tokend-test")
    p.add_argument("--header", default="X-Auth-Token")
    args = p.parse_args()

    pda = PDA(args.application, args.header)
    server = ThreadingHTTPServer(("127.0.0.1", args.port), make_handler(pda))
    server.daemon_threads = True
    port = server.server_address[1]
    pda.address = f"127.0.0.1:{port}"
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    print(f"READY {port}", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""The token realm of a Docker registry (distribution's token auth), checking logins at the test IdP.

    registry_realm.py make-pki --out DIR
        DIR/realm.key and DIR/realm.pem: the realm's RSA key and the self-signed certificate that
        is the registry's `auth.token.rootcertbundle`.
    registry_realm.py make-image --out DIR
        An OCI image layout (one small layer) that `skopeo copy oci:DIR:latest ...` pushes.
    registry_realm.py serve --introspect URL --key F --cert F --issuer I --service S --port N --log FILE
        Binds 127.0.0.1:N. `GET /token?service=S&scope=repository:NAME:pull,push` with HTTP Basic
        credentials (any username, the access token as password): the token is checked with the
        IdP's RFC 7662 introspection endpoint (client tokend-test); while it is active, the answer
        is a registry JWT (RS256, `kid` from the certificate's key) granting the asked actions.
        Otherwise 401. The log gets `issued FINGERPRINT SCOPE` or `refused FINGERPRINT`, where
        FINGERPRINT is the first 16 hex digits of the token's SHA-256 (never the token).

The credential comes only from Basic auth, as the container tools send what their credential
helper answered.
"""
import argparse
import base64
import datetime
import gzip
import hashlib
import http.server
import io
import json
import os
import signal
import sys
import tarfile
import threading
import time
import urllib.parse
import uuid

from bearer_gate import active  # RFC 7662 introspection at the test IdP, as the other gates check tokens


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def fingerprint(token):
    return hashlib.sha256(token.encode()).hexdigest()[:16] if token else "none"


def libtrust_key_id(public_key):
    """The key ID distribution computes for a trusted key (libtrust): base32 of the first 240
    bits of the SHA-256 of the DER public key, in groups of four."""
    from cryptography.hazmat.primitives import serialization
    der = public_key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    text = base64.b32encode(hashlib.sha256(der).digest()[:30]).decode().rstrip("=")
    return ":".join(text[i:i + 4] for i in range(0, len(text), 4))


def make_pki(args):
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import NameOID
    os.makedirs(args.out, exist_ok=True)
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "tokend test registry realm")])
    now = datetime.datetime.now(datetime.timezone.utc)
    certificate = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
                   .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
                   .not_valid_after(now + datetime.timedelta(days=1))
                   .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                   .sign(key, hashes.SHA256()))
    with open(os.path.join(args.out, "realm.key"), "wb") as out:
        os.fchmod(out.fileno(), 0o600)
        out.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption()))
    with open(os.path.join(args.out, "realm.pem"), "wb") as out:
        out.write(certificate.public_bytes(serialization.Encoding.PEM))


def make_image(args):
    blobs = os.path.join(args.out, "blobs", "sha256")
    os.makedirs(blobs, exist_ok=True)

    def blob(data):
        digest = hashlib.sha256(data).hexdigest()
        with open(os.path.join(blobs, digest), "wb") as out:
            out.write(data)
        return {"digest": "sha256:" + digest, "size": len(data)}

    content = b"hello from tokend's registry test\n"
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("hello.txt")
        info.size, info.mtime, info.mode = len(content), 0, 0o644
        tar.addfile(info, io.BytesIO(content))
    layer_tar = raw.getvalue()
    layer = dict(blob(gzip.compress(layer_tar, mtime=0)), mediaType="application/vnd.oci.image.layer.v1.tar+gzip")
    config = dict(blob(json.dumps({
        "architecture": "amd64", "os": "linux", "config": {},
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(layer_tar).hexdigest()]},
    }).encode()), mediaType="application/vnd.oci.image.config.v1+json")
    manifest = dict(blob(json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json", "config": config,
        "layers": [layer],
    }).encode()), mediaType="application/vnd.oci.image.manifest.v1+json",
        annotations={"org.opencontainers.image.ref.name": "latest"})
    with open(os.path.join(args.out, "index.json"), "w") as out:
        json.dump({"schemaVersion": 2, "manifests": [manifest]}, out)
    with open(os.path.join(args.out, "oci-layout"), "w") as out:
        json.dump({"imageLayoutVersion": "1.0.0"}, out)


class Realm(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    args = None
    key = None
    kid = None
    log_lock = threading.Lock()

    def log_message(self, *_):
        pass

    def record(self, line):
        with self.log_lock, open(self.args.log, "a") as log:
            log.write(line + "\n")

    def reply(self, status, body, headers=()):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        path, _, query = self.path.partition("?")
        if path != "/token":
            return self.reply(404, {"error": "not found"})
        parameters = urllib.parse.parse_qs(query)
        scheme, _, value = self.headers.get("Authorization", "").partition(" ")
        token = None
        if scheme.lower() == "basic":
            try:
                token = base64.b64decode(value).decode().partition(":")[2]
            except ValueError:
                token = None
        if not active(self.args.introspect, token):
            self.record(f"refused {fingerprint(token)}")
            return self.reply(401, {"errors": [{"code": "UNAUTHORIZED", "message": "token refused"}]},
                              [("WWW-Authenticate", 'Basic realm="tokend-test-realm"')])
        access = []
        for scope in parameters.get("scope", []):
            for item in scope.split(" "):
                kind, _, rest = item.partition(":")
                name, _, actions = rest.rpartition(":")
                if kind == "repository" and name:
                    access.append({"type": kind, "name": name, "actions": [a for a in actions.split(",") if a]})
        now = int(time.time())
        claims = {"iss": self.args.issuer, "sub": "tokend-user", "aud": self.args.service, "exp": now + 300,
                  "nbf": now - 10, "iat": now, "jti": str(uuid.uuid4()), "access": access}
        self.record(f"issued {fingerprint(token)} {' '.join(parameters.get('scope', [])) or '-'}")
        self.reply(200, {"token": self.sign(claims), "expires_in": 300,
                         "issued_at": datetime.datetime.fromtimestamp(now, datetime.timezone.utc).isoformat()})

    def sign(self, claims):
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import padding
        header = {"typ": "JWT", "alg": "RS256", "kid": self.kid}
        signing_input = b64url(json.dumps(header).encode()) + "." + b64url(json.dumps(claims).encode())
        signature = self.key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
        return signing_input + "." + b64url(signature)


def serve(args):
    from cryptography.hazmat.primitives import serialization
    with open(args.key, "rb") as source:
        Realm.key = serialization.load_pem_private_key(source.read(), password=None)
    Realm.kid = libtrust_key_id(Realm.key.public_key())
    Realm.args = args
    server = http.server.ThreadingHTTPServer(("127.0.0.1", args.port), Realm)
    server.daemon_threads = True
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    print(f"READY {server.server_address[1]}", flush=True)
    server.serve_forever()


def main():
    parser = argparse.ArgumentParser()
    commands = parser.add_subparsers(dest="command", required=True)
    pki = commands.add_parser("make-pki")
    pki.add_argument("--out", required=True)
    image = commands.add_parser("make-image")
    image.add_argument("--out", required=True)
    run = commands.add_parser("serve")
    for name in ["--introspect", "--key", "--issuer", "--service", "--log"]:
        run.add_argument(name, required=True)
    run.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    {"make-pki": make_pki, "make-image": make_image, "serve": serve}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""tokend test IdP: django-oauth-toolkit behind gunicorn, plus ORM helpers.

Run with the venv python from scripts/test-venv.sh. Subcommands (see README.md):
  serve, mint, revoke, token-info, count-posts, approve-device, refresh-tokens, device-polls, make-ca
All state (SQLite DB, access.log, gunicorn.log, OIDC key) lives in --state-dir.
"""
import argparse
import ctypes
import datetime
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent

USER, PASSWORD = "alice", "alice-pw"
CLIENT_ID, CLIENT_SECRET = "tokend-test", "tokend-test-secret"
PUBLIC_CLIENT_ID, DEVICE_CLIENT_ID = "tokend-public", "tokend-device"
REDIRECT_URI = "http://127.0.0.1/callback"


def log(msg):
    print(f"idp: {msg}", file=sys.stderr, flush=True)


def django_setup(state_dir, env=None):
    """Point settings at state_dir (plus any IDP_* overrides) and set up Django."""
    state_dir.mkdir(parents=True, exist_ok=True)
    os.environ["IDP_STATE_DIR"] = str(state_dir)
    os.environ.update(env or {})
    os.environ["DJANGO_SETTINGS_MODULE"] = "idpsite.settings"
    sys.path.insert(0, str(HERE))
    import django
    django.setup()


def bootstrap(oidc=False, device=False):
    """Migrate, then create or update alice and the clients (idempotent)."""
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from oauth2_provider.models import Application

    call_command("migrate", interactive=False, verbosity=0)
    user, _ = get_user_model().objects.get_or_create(username=USER)
    user.set_password(PASSWORD)
    user.save()

    common = dict(user=user, redirect_uris=REDIRECT_URI, skip_authorization=True,
                  algorithm=Application.RS256_ALGORITHM if oidc else Application.NO_ALGORITHM)
    clients = [
        # authorization-code also allows refresh_token grants in DOT.
        (CLIENT_ID, dict(client_type=Application.CLIENT_CONFIDENTIAL, client_secret=CLIENT_SECRET,
                         authorization_grant_type=Application.GRANT_AUTHORIZATION_CODE)),
        (PUBLIC_CLIENT_ID, dict(client_type=Application.CLIENT_PUBLIC, client_secret="",
                                hash_client_secret=False,
                                authorization_grant_type=Application.GRANT_AUTHORIZATION_CODE)),
    ]
    if device:
        clients.append((DEVICE_CLIENT_ID, dict(client_type=Application.CLIENT_PUBLIC, client_secret="",
                                               hash_client_secret=False,
                                               authorization_grant_type=Application.GRANT_DEVICE_CODE)))
    for client_id, fields in clients:
        Application.objects.update_or_create(client_id=client_id, defaults=dict(common, name=client_id, **fields))


def ensure_oidc_key(state_dir):
    path = state_dir / "oidc-rsa.pem"
    if not path.exists():
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import rsa
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))


def _die_with_parent():
    # Runs in the child before exec: SIGTERM gunicorn if idp.py dies (even by
    # SIGKILL), so a crashed test never leaves a stray server behind.
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def cmd_serve(a):
    state = Path(a.state_dir).resolve()
    state.mkdir(parents=True, exist_ok=True)
    if a.oidc:
        ensure_oidc_key(state)
    tls = bool(a.tls_cert)
    if tls != bool(a.tls_key):
        sys.exit("idp: --tls-cert and --tls-key go together")

    # Bind here and hand the socket to gunicorn (fd://), so --port 0 works
    # without races and READY reports the real port.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", a.port))
    sock.listen(256)
    sock.set_inheritable(True)
    port = sock.getsockname()[1]
    base_url = f"{'https' if tls else 'http'}://127.0.0.1:{port}"

    env = {
        "IDP_ACCESS_TOKEN_LIFETIME": str(a.access_token_lifetime),
        "IDP_REFRESH_GRACE": str(a.refresh_grace),
        "IDP_REUSE_PROTECTION": "1" if a.reuse_protection else "0",
        "IDP_ROTATE": "1" if a.rotate else "0",
        "IDP_DEVICE_FLOW": "1" if a.device_flow else "0",
        "IDP_OIDC": "1" if a.oidc else "0",
        "IDP_DEVICE_INTERVAL": str(a.device_interval),
        "IDP_DEVICE_CODE_LIFETIME": str(a.device_code_lifetime or ""),
        "IDP_DEVICE_SLOW_DOWN_FIRST": "1" if a.device_slow_down_first else "0",
        "IDP_BASE_URL": base_url,
    }
    django_setup(state, env)
    bootstrap(oidc=a.oidc, device=a.device_flow)
    from django.db import connections
    connections.close_all()

    import gunicorn
    cmd = [sys.executable, "-m", "gunicorn", "--bind", f"fd://{sock.fileno()}",
           "--worker-class", "gthread", "--workers", str(a.workers), "--threads", "2",
           "--graceful-timeout", "3", "--chdir", str(HERE), "--pythonpath", str(HERE)]
    if gunicorn.version_info >= (27,):
        cmd.append("--no-control-socket")  # else two servers collide on ~/.gunicorn
    if tls:
        cmd += ["--certfile", str(Path(a.tls_cert).resolve()), "--keyfile", str(Path(a.tls_key).resolve())]
    cmd.append("idpsite.wsgi:application")

    stop = []
    child = None

    def on_signal(signum, _frame):
        stop.append(signum)
        if child is not None and child.poll() is None:
            child.send_signal(signal.SIGTERM)  # gunicorn: graceful shutdown

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    with open(state / "gunicorn.log", "ab") as glog:
        child = subprocess.Popen(cmd, pass_fds=(sock.fileno(),), stdin=subprocess.DEVNULL,
                                 stdout=glog, stderr=glog, env=os.environ.copy(),
                                 preexec_fn=_die_with_parent)
    sock.close()
    if stop:  # signalled before the child existed
        child.send_signal(signal.SIGTERM)

    # READY only once a worker has answered a real request.
    ctx = ssl._create_unverified_context() if tls else None
    deadline = time.monotonic() + 60
    while not stop:
        if child.poll() is not None:
            sys.exit(f"idp: gunicorn exited with {child.returncode}; see {state / 'gunicorn.log'}")
        try:
            with urllib.request.urlopen(f"{base_url}/healthz", timeout=2, context=ctx) as r:
                if r.status == 200:
                    break
        except OSError:
            pass
        if time.monotonic() > deadline:
            child.terminate()
            sys.exit("idp: gunicorn did not become ready in 60 s")
        time.sleep(0.05)
    if not stop:
        print(f"READY {port}", flush=True)

    while True:
        try:
            rc = child.wait()
            break
        except InterruptedError:
            continue
    sys.exit(0 if stop else (rc or 1))


def cmd_mint(a):
    state = Path(a.state_dir).resolve()
    fresh = not (state / "idp.sqlite3").exists()
    django_setup(state)
    if fresh:
        bootstrap()
    from django.contrib.auth import get_user_model
    from django.db import transaction
    from django.utils import timezone
    from oauth2_provider.models import AccessToken, Application, RefreshToken, set_token_value
    from oauthlib.common import generate_token

    user = get_user_model().objects.get(username=USER)
    app = Application.objects.get(client_id=a.client)
    prefix = f"{a.prefix}-" if a.prefix else ""
    for _ in range(a.count):
        access, refresh = prefix + generate_token(), prefix + generate_token()
        with transaction.atomic():
            at = AccessToken(user=user, application=app, scope=a.scope,
                             expires=timezone.now() + datetime.timedelta(seconds=a.lifetime))
            set_token_value(at, access)
            at.save()
            rt = RefreshToken(user=user, application=app, access_token=at, token_family=uuid.uuid4())
            set_token_value(rt, refresh)
            rt.save()
        print(json.dumps({"access_token": access, "refresh_token": refresh, "expires_in": a.lifetime,
                          "token_type": "Bearer", "scope": a.scope}), flush=True)


def cmd_revoke(a):
    import hashlib
    django_setup(Path(a.state_dir).resolve())
    from oauth2_provider.models import RefreshToken
    checksum = hashlib.sha256(a.refresh_token.encode()).hexdigest()
    rt = RefreshToken.objects.filter(token_checksum=checksum, revoked__isnull=True).first()
    if rt is None:
        sys.exit("idp: no live refresh token with that value")
    rt.revoke()  # marks it revoked and deletes its access token
    print("revoked")


def cmd_token_info(a):
    """What the server holds of an access token: its scope and resources, or that it is gone."""
    import hashlib
    django_setup(Path(a.state_dir).resolve())
    from oauth2_provider.models import AccessToken
    checksum = hashlib.sha256(a.access_token.encode()).hexdigest()
    at = AccessToken.objects.filter(token_checksum=checksum).first()
    if at is None:
        print(json.dumps({"active": False}))
        return
    print(json.dumps({"active": not at.is_expired(), "scope": at.scope, "resource": at.resource or []}))


def cmd_count_posts(a):
    n = 0
    try:
        with open(Path(a.state_dir) / "access.log") as f:
            for line in f:
                parts = line.split()
                n += len(parts) >= 2 and parts[0] == "POST" and parts[1] == a.path
    except FileNotFoundError:
        pass
    print(n)


def cmd_approve_device(a):
    django_setup(Path(a.state_dir).resolve())
    from django.contrib.auth import get_user_model
    from oauth2_provider.models import DeviceGrant
    n = DeviceGrant.objects.filter(user_code=a.user_code, status=DeviceGrant.AUTHORIZATION_PENDING).update(
        status=DeviceGrant.DENIED if a.deny else DeviceGrant.AUTHORIZED,
        user=get_user_model().objects.get(username=USER))
    if not n:
        sys.exit("idp: no pending device grant with that user code")
    print("denied" if a.deny else "approved")


def cmd_refresh_tokens(a):
    django_setup(Path(a.state_dir).resolve())
    from oauth2_provider.models import RefreshToken
    for value in RefreshToken.objects.filter(application__client_id=a.client).values_list("token", flat=True):
        print(value)


def cmd_device_polls(a):
    sys.path.insert(0, str(HERE))
    from idpsite.device_polling import summary
    print(json.dumps(summary(Path(a.state_dir).resolve())))


def cmd_make_ca(a):
    import ipaddress
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)

    def name(cn):
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    def pem_key(key):
        return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                 serialization.NoEncryption())

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (x509.CertificateBuilder().subject_name(name("tokend test CA")).issuer_name(name("tokend test CA"))
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=3650))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
          .sign(ca_key, hashes.SHA256()))

    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder().subject_name(name("127.0.0.1")).issuer_name(ca.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=365))
            .add_extension(x509.SubjectAlternativeName([
                x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                x509.IPAddress(ipaddress.ip_address("::1"))]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=False, crl_sign=False,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))

    (out / "ca.pem").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    (out / "ca.key").write_bytes(pem_key(ca_key))
    (out / "server.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (out / "server.key").write_bytes(pem_key(key))
    os.chmod(out / "server.key", 0o600)
    os.chmod(out / "ca.key", 0o600)
    print(out.resolve())


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)

    s = sub.add_parser("serve", help="run the IdP; prints 'READY <port>' when it answers")
    s.add_argument("--port", type=int, required=True, help="0 picks a free port")
    s.add_argument("--state-dir", required=True)
    s.add_argument("--access-token-lifetime", type=int, default=3600, metavar="SECONDS")
    s.add_argument("--refresh-grace", type=int, default=0, metavar="SECONDS")
    s.add_argument("--reuse-protection", action="store_true")
    s.add_argument("--rotate", action=argparse.BooleanOptionalAction, default=True)
    s.add_argument("--tls-cert")
    s.add_argument("--tls-key")
    s.add_argument("--device-flow", action="store_true")
    s.add_argument("--oidc", action="store_true")
    s.add_argument("--device-interval", type=int, default=5, metavar="SECONDS", help="RFC 8628 polling interval")
    s.add_argument("--device-code-lifetime", type=int, default=0, metavar="SECONDS", help="device code expires_in (default 1800)")
    s.add_argument("--device-slow-down-first", action="store_true", help="answer the first poll of each code with slow_down")
    s.add_argument("--workers", type=int, default=2, help=argparse.SUPPRESS)
    s.set_defaults(func=cmd_serve)

    m = sub.add_parser("mint", help="create token pairs for alice; one token-response JSON per line")
    m.add_argument("--state-dir", required=True)
    m.add_argument("--count", type=int, default=1)
    m.add_argument("--prefix", default="", help="prepended (with '-') to every token value")
    m.add_argument("--lifetime", type=int, default=3600, metavar="SECONDS")
    m.add_argument("--client", default=CLIENT_ID)
    m.add_argument("--scope", default="read")
    m.set_defaults(func=cmd_mint)

    r = sub.add_parser("revoke", help="revoke a refresh token (and its access token)")
    r.add_argument("--state-dir", required=True)
    r.add_argument("--refresh-token", required=True)
    r.set_defaults(func=cmd_revoke)

    ti = sub.add_parser("token-info", help="scope and resources of an access token, as JSON ({\"active\": false} when gone)")
    ti.add_argument("--state-dir", required=True)
    ti.add_argument("--access-token", required=True)
    ti.set_defaults(func=cmd_token_info)

    c = sub.add_parser("count-posts", help="POST lines to PATH in the access log")
    c.add_argument("--state-dir", required=True)
    c.add_argument("--path", default="/o/token/")
    c.set_defaults(func=cmd_count_posts)

    d = sub.add_parser("approve-device", help="approve (or --deny) a pending device-flow user code")
    d.add_argument("--state-dir", required=True)
    d.add_argument("--user-code", required=True)
    d.add_argument("--deny", action="store_true")
    d.set_defaults(func=cmd_approve_device)

    rt = sub.add_parser("refresh-tokens", help="every refresh token issued to --client, one per line (to prove they leak nowhere)")
    rt.add_argument("--state-dir", required=True)
    rt.add_argument("--client", default=CLIENT_ID)
    rt.set_defaults(func=cmd_refresh_tokens)

    dp = sub.add_parser("device-polls", help="device-flow polls, slow_downs and too-early polls, as JSON")
    dp.add_argument("--state-dir", required=True)
    dp.set_defaults(func=cmd_device_polls)

    k = sub.add_parser("make-ca", help="write ca.pem, server.pem, server.key (127.0.0.1, ::1, localhost)")
    k.add_argument("--out", required=True)
    k.set_defaults(func=cmd_make_ca)

    a = p.parse_args()
    a.func(a)


if __name__ == "__main__":
    main()

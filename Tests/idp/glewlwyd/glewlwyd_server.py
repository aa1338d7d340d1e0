#!/usr/bin/env python3
"""Run Debian's glewlwyd (2.7.x) as a throw-away OAuth2/OIDC server for tests.

Python 3 stdlib only (plus the `openssl` and `glewlwyd` executables).

    glewlwyd_server.py serve [--state-dir DIR] [--no-tls] [--port N] [...]
        -> prints ONE JSON line (issuer, endpoints, clients, key/cert paths, user)
           and runs until SIGTERM/SIGINT (which stops glewlwyd cleanly).
    glewlwyd_server.py token --state-dir DIR [--client tokend-secret] [--scope "openid read offline_access"]
        -> prints the token response of a resource-owner password grant for the test user
    glewlwyd_server.py code-token --state-dir DIR [--client tokend-secret] [--scope ...]
        -> same, but through a programmatic authorization-code flow (login API + grant + /auth + /token)

The `info.json` written into the state dir holds the same JSON as the printed line,
so helpers (and tests) can find everything from the state dir alone.
"""

import argparse
import base64
import gzip
import hashlib
import http.client
import json
import os
import secrets
import signal
import socket
import sqlite3
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.parse

GLEWLWYD = "/usr/bin/glewlwyd"
INIT_SQL = "/usr/share/doc/glewlwyd/database/init.sqlite3.sql.gz"
PLUGIN = "oidc"                      # plugin instance name -> /api/oidc/...
ADMIN_USER, ADMIN_PASSWORD = "admin", "password"   # created by the package's init script
USER, USER_PASSWORD = "alice", "alice-pw"
SCOPES = ["read", "write", "offline_access"]       # + the built-in "openid"
RESOURCE = "https://rs.tokend.test/"
REDIRECT_URI = "http://127.0.0.1/callback"

CLIENT_SECRET_ID, CLIENT_SECRET = "tokend-secret", "tokend-secret-secret"
CLIENT_PKJ_RSA = "tokend-pkjwt-rsa"
CLIENT_PKJ_EC = "tokend-pkjwt-ec"
CLIENT_MTLS = "tokend-mtls"
CLIENT_MTLS_SAN_DNS = "tokend-mtls.client.test"
CLIENT_SELF_MTLS = "tokend-mtls-self"
CLIENT_PUBLIC = "tokend-public"
GRANT_TYPES = ["code", "refresh_token", "password", "device_authorization", "delete_token"]


# --------------------------------------------------------------------------- helpers

def b64u(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def run(cmd, **kw):
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, **kw)


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def openssl_pubkey_der(key_file):
    return subprocess.run(["openssl", "pkey", "-in", key_file, "-pubout", "-outform", "DER"],
                          check=True, capture_output=True).stdout


def _der_len(buf, i):
    n = buf[i]
    i += 1
    if n < 0x80:
        return n, i
    k = n & 0x7F
    return int.from_bytes(buf[i:i + k], "big"), i + k


def _der_items(buf):
    """Split the content of a DER SEQUENCE/BIT STRING into (tag, value) items."""
    i, out = 0, []
    while i < len(buf):
        tag = buf[i]
        n, j = _der_len(buf, i + 1)
        out.append((tag, buf[j:j + n]))
        i = j + n
    return out


def jwk_from_key(key_file, kid, alg):
    """Public JWK from a PEM private key (RSA or EC P-256), parsed from openssl's SPKI DER."""
    der = openssl_pubkey_der(key_file)
    (_, spki), = _der_items(der)
    (_, algid), (_, bitstr) = _der_items(spki)
    key = bitstr[1:]                     # skip "unused bits" byte
    if alg.startswith("RS") or alg.startswith("PS"):
        (_, rsa), = _der_items(key)
        (_, n), (_, e) = _der_items(rsa)
        n = n.lstrip(b"\x00")
        return {"kty": "RSA", "n": b64u(n), "e": b64u(e), "kid": kid, "alg": alg, "use": "sig"}
    assert key[0] == 4 and len(key) == 65, "only uncompressed P-256 points"
    return {"kty": "EC", "crv": "P-256", "x": b64u(key[1:33]), "y": b64u(key[33:]),
            "kid": kid, "alg": alg, "use": "sig"}


def sign_jwt(key_file, header, claims):
    """Compact JWS with RS256 or ES256 using `openssl dgst` (no third-party modules)."""
    signing_input = (b64u(json.dumps(header, separators=(",", ":")).encode()) + "." +
                     b64u(json.dumps(claims, separators=(",", ":")).encode())).encode()
    sig = subprocess.run(["openssl", "dgst", "-sha256", "-sign", key_file],
                         input=signing_input, check=True, capture_output=True).stdout
    if header["alg"] == "ES256":         # DER ECDSA-Sig-Value -> raw r||s
        (_, seq), = _der_items(sig)
        (_, r), (_, s) = _der_items(seq)
        sig = int.from_bytes(r, "big").to_bytes(32, "big") + int.from_bytes(s, "big").to_bytes(32, "big")
    return signing_input.decode() + "." + b64u(sig)


def client_assertion(key_file, kid, alg, client_id, audience, lifetime=60):
    now = int(time.time())
    return sign_jwt(key_file, {"alg": alg, "typ": "JWT", "kid": kid},
                    {"iss": client_id, "sub": client_id, "aud": audience, "iat": now,
                     "exp": now + lifetime, "jti": secrets.token_hex(16)})


def dpop_proof(key_file, jwk, method, url, nonce=None, ath=None):
    claims = {"jti": secrets.token_hex(16), "htm": method, "htu": url, "iat": int(time.time())}
    if nonce:
        claims["nonce"] = nonce
    if ath:
        claims["ath"] = ath
    pub = {k: jwk[k] for k in ("kty", "crv", "x", "y", "n", "e") if k in jwk}
    return sign_jwt(key_file, {"typ": "dpop+jwt", "alg": jwk["alg"], "jwk": pub}, claims)


# --------------------------------------------------------------------------- HTTP

class Http:
    """Tiny client: one connection per request, optional TLS client cert, cookie kept by caller."""

    def __init__(self, base, ca_file=None, cert=None, key=None):
        u = urllib.parse.urlsplit(base)
        self.scheme, self.host, self.port = u.scheme, u.hostname, u.port
        self.ctx = None
        if self.scheme == "https":
            self.ctx = ssl.create_default_context(cafile=ca_file)
            if cert:
                self.ctx.load_cert_chain(cert, key)

    def request(self, method, path, body=None, headers=None, form=None, timeout=10):
        headers = dict(headers or {})
        if form is not None:
            body = urllib.parse.urlencode(form)
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        elif body is not None and not isinstance(body, (bytes, str)):
            body = json.dumps(body)
            headers["Content-Type"] = "application/json"
        if self.scheme == "https":
            c = http.client.HTTPSConnection(self.host, self.port, context=self.ctx, timeout=timeout)
        else:
            c = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            c.request(method, path, body=body, headers=headers)
            r = c.getresponse()
            data = r.read()
            return r.status, r.headers, data
        finally:
            c.close()


def session_cookie(headers):
    for v in headers.get_all("Set-Cookie") or []:
        if v.startswith("GLEWLWYD2_SESSION_ID="):
            return v.split(";", 1)[0]
    return None


def check(status, data, what, ok=(200,)):
    if status not in ok:
        raise RuntimeError(f"{what}: HTTP {status}: {data[:500]!r}")


def login(h, username, password):
    st, hd, data = h.request("POST", "/api/auth/", {"username": username, "password": password})
    check(st, data, f"login {username}")
    cookie = session_cookie(hd)
    if not cookie:
        raise RuntimeError("login: no session cookie")
    return cookie


# --------------------------------------------------------------------------- files

def make_pki(d):
    """Test CA, server cert (127.0.0.1/localhost), mTLS client cert, self-signed client cert, JWT keys."""
    def p(name):
        return os.path.join(d, name)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    run(["openssl", "req", "-x509", *ec, "-keyout", p("ca.key"), "-out", p("ca.pem"), "-days", "7",
         "-subj", "/CN=tokend glewlwyd test CA",
         "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign"])
    for name, subj, exts in (
            ("server", "/CN=127.0.0.1",
             ["subjectAltName=IP:127.0.0.1,IP:::1,DNS:localhost", "extendedKeyUsage=serverAuth"]),
            ("client", f"/CN={CLIENT_MTLS}/O=tokend tests",
             [f"subjectAltName=DNS:{CLIENT_MTLS_SAN_DNS}", "extendedKeyUsage=clientAuth"])):
        run(["openssl", "req", "-new", *ec, "-keyout", p(name + ".key"), "-out", p(name + ".csr"), "-subj", subj])
        with open(p(name + ".ext"), "w") as f:
            f.write("basicConstraints=CA:FALSE\n" + "\n".join(exts) + "\n")
        run(["openssl", "x509", "-req", "-in", p(name + ".csr"), "-CA", p("ca.pem"), "-CAkey", p("ca.key"),
             "-CAcreateserial", "-days", "7", "-extfile", p(name + ".ext"), "-out", p(name + ".pem")])
    run(["openssl", "req", "-x509", *ec, "-keyout", p("selfsigned.key"), "-out", p("selfsigned.pem"),
         "-days", "7", "-subj", f"/CN={CLIENT_SELF_MTLS}", "-addext", "extendedKeyUsage=clientAuth"])
    # token signing key of the server (RSA, RS256)
    run(["openssl", "genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", p("issuer-rsa.key")])
    run(["openssl", "pkey", "-in", p("issuer-rsa.key"), "-pubout", "-out", p("issuer-rsa.pub")])
    # private_key_jwt client keys + a DPoP key
    run(["openssl", "genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", p("pkjwt-rsa.key")])
    run(["openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", p("pkjwt-ec.key")])
    run(["openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", p("dpop-ec.key")])
    for f in os.listdir(d):
        if f.endswith((".csr", ".ext", ".srl")):
            os.unlink(p(f))


def write_conf(d, port, tls, log_level):
    scheme = "https" if tls else "http"
    conf = f"""# generated by glewlwyd_server.py
port={port}
bind_address="127.0.0.1"
external_url="{scheme}://127.0.0.1:{port}"
login_url="login.html"
api_prefix="api"
static_files_path="/usr/share/glewlwyd/webapp/"
allow_origin="*"
log_mode="file"
log_level="{log_level}"
log_file="{d}/glewlwyd.log"
cookie_secure=0
cookie_same_site="empty"
session_expiration=2419200
session_key="GLEWLWYD2_SESSION_ID"
admin_session_authentication="cookie"
profile_session_authentication="cookie"
allow_multiple_user_per_session=true
login_api_enabled=true
plugin_api_run_enabled=""
add_x_frame_option_header_deny=true
max_post_size=16778240
admin_scope="g_admin"
profile_scope="g_profile"
user_module_path="/usr/lib/glewlwyd/user"
user_middleware_module_path="/usr/lib/glewlwyd/user_middleware"
client_module_path="/usr/lib/glewlwyd/client"
user_auth_scheme_module_path="/usr/lib/glewlwyd/scheme"
plugin_module_path="/usr/lib/glewlwyd/plugin"
use_secure_connection={"true" if tls else "false"}
secure_connection_key_file="{d}/server.key"
secure_connection_pem_file="{d}/server.pem"
secure_connection_ca_file="{d}/ca.pem"
hash_algorithm="SHA512"
database =
{{
  type = "sqlite3"
  path = "{d}/glewlwyd.db"
}};
"""
    with open(os.path.join(d, "glewlwyd.conf"), "w") as f:
        f.write(conf)


def init_db(d):
    db = os.path.join(d, "glewlwyd.db")
    if os.path.exists(db):
        os.unlink(db)
    with gzip.open(INIT_SQL, "rt") as f:
        sql = f.read()
    con = sqlite3.connect(db)
    con.executescript(sql)
    con.commit()
    con.close()


# --------------------------------------------------------------------------- provisioning

def plugin_parameters(issuer, d, a):
    with open(os.path.join(d, "issuer-rsa.key")) as f:
        key = f.read()
    with open(os.path.join(d, "issuer-rsa.pub")) as f:
        pub = f.read()
    return {
        "iss": issuer,
        "jwt-type": "rsa", "jwt-key-size": "256", "key": key, "cert": pub,
        "access-token-duration": a.access_token_lifetime,
        "refresh-token-duration": a.refresh_token_lifetime,
        "code-duration": 600,
        "refresh-token-rolling": True,
        "refresh-token-one-use": a.refresh_token_one_use,       # never | always | client-driven
        "client-refresh-token-one-use-parameter": "refresh-token-one-use",
        "allow-non-oidc": True,                                  # password grant, no-openid requests
        "auth-type-code-enabled": True, "auth-type-code-revoke-replayed": False,
        "auth-type-token-enabled": False, "auth-type-id-token-enabled": True,
        "auth-type-none-enabled": True, "auth-type-password-enabled": True,
        "auth-type-client-enabled": True, "auth-type-device-enabled": True,
        "auth-type-refresh-enabled": True,
        "scope": [], "additional-parameters": [], "claims": [],
        "service-documentation": "", "op-policy-uri": "", "op-tos-uri": "",
        "jwks-show": True, "jwks-x5c": [],
        "request-parameter-allow": True, "request-uri-allow-https-non-secure": False,
        "request-parameter-allow-encrypted": False, "request-parameter-ietf-strict": False,
        "request-maximum-exp": 3600,
        "secret-type": "pairwise",
        "address-claim": {"type": "no", "formatted": "", "street_address": "", "locality": "", "region": "",
                          "postal_code": "", "country": "", "mandatory": False},
        "name-claim": "on-demand", "name-claim-scope": [], "email-claim": "no", "email-claim-scope": [],
        "scope-claim": "no", "scope-claim-scope": [],
        "allowed-scope": ["openid"] + SCOPES,
        "pkce-allowed": True, "pkce-method-plain-allowed": False, "pkce-required": False,
        "pkce-required-public-client": False, "pkce-scopes": [],
        "introspection-revocation-allowed": True, "introspection-revocation-auth-scope": [],
        "introspection-revocation-allow-target-client": True,
        "register-client-allowed": False,
        "session-management-allowed": False,
        "client-pubkey-parameter": "", "client-jwks-parameter": "jwks", "client-jwks_uri-parameter": "jwks_uri",
        "encrypt-out-token-allow": False,
        "device-authorization-expiration": a.device_code_lifetime,
        "device-authorization-interval": a.device_interval,
        "client-cert-source": "TLS" if a.tls else "header",
        "client-cert-header-name": "SSL_CLIENT_CERT",
        "client-cert-use-endpoint-aliases": a.mtls_aliases,
        "client-cert-self-signed-allowed": True,
        "oauth-dpop-allowed": True,
        "oauth-dpop-iat-duration": 60,
        "oauth-dpop-iat-gap-duration": 0,
        "oauth-dpop-nonce-mandatory": a.dpop_nonce,
        "oauth-dpop-nonce-counter": 10,
        "resource-allowed": True,
        "resource-scope": {s: [RESOURCE] for s in SCOPES},
        "resource-client-property": "resource",
        "resource-scope-and-client-property": False,
        "oauth-rar-allowed": False, "oauth-par-allowed": False, "oauth-ciba-allowed": False,
        "oauth-fapi-check-all": False,
    }


def provision(h, info, d, a):
    cookie = login(h, ADMIN_USER, ADMIN_PASSWORD)
    hdr = {"Cookie": cookie}

    def api(method, path, body):
        st, _, data = h.request(method, path, body, headers=hdr)
        check(st, data, f"{method} {path}")
        return data

    for s in SCOPES:
        api("POST", "/api/scope/", {"name": s, "display_name": s, "description": f"test scope {s}",
                                    "password_required": True, "password_max_age": 0, "scheme": {}})
    api("POST", "/api/mod/plugin/", {"module": "oidc", "name": PLUGIN, "display_name": "OIDC for tokend tests",
                                     "parameters": plugin_parameters(info["issuer"], d, a)})
    api("POST", "/api/user/", {"username": USER, "password": USER_PASSWORD, "name": "Alice", "email": "",
                               "enabled": True, "scope": ["openid", "g_profile"] + SCOPES})

    rsa_jwk = jwk_from_key(os.path.join(d, "pkjwt-rsa.key"), "pkjwt-rsa-1", "RS256")
    ec_jwk = jwk_from_key(os.path.join(d, "pkjwt-ec.key"), "pkjwt-ec-1", "ES256")
    with open(os.path.join(d, "selfsigned.pem")) as f:
        self_der = ssl.PEM_cert_to_DER_cert(f.read())
    self_jwk = jwk_from_key(os.path.join(d, "selfsigned.key"), "selfsigned-1", "ES256")
    self_jwk["x5c"] = [base64.b64encode(self_der).decode()]

    base = {"enabled": True, "redirect_uri": [REDIRECT_URI], "authorization_type": GRANT_TYPES,
            "scope": SCOPES, "resource": [RESOURCE]}
    clients = [
        dict(base, client_id=CLIENT_SECRET_ID, name="client_secret_basic", confidential=True,
             client_secret=CLIENT_SECRET, token_endpoint_auth_method=["client_secret_basic", "client_secret_post"],
             authorization_type=GRANT_TYPES + ["client_credentials"]),
        dict(base, client_id=CLIENT_PKJ_RSA, name="private_key_jwt RS256", confidential=True,
             token_endpoint_auth_method=["private_key_jwt"], token_endpoint_signing_alg="RS256",
             jwks={"keys": [rsa_jwk]}),
        dict(base, client_id=CLIENT_PKJ_EC, name="private_key_jwt ES256", confidential=True,
             token_endpoint_auth_method=["private_key_jwt"], token_endpoint_signing_alg="ES256",
             jwks={"keys": [ec_jwk]}),
        dict(base, client_id=CLIENT_MTLS, name="tls_client_auth", confidential=True,
             token_endpoint_auth_method=["tls_client_auth"], tls_client_auth_san_dns=CLIENT_MTLS_SAN_DNS),
        dict(base, client_id=CLIENT_SELF_MTLS, name="self_signed_tls_client_auth", confidential=True,
             token_endpoint_auth_method=["self_signed_tls_client_auth"], jwks={"keys": [self_jwk]}),
        dict(base, client_id=CLIENT_PUBLIC, name="public (DPoP, PKCE)", confidential=False,
             token_endpoint_auth_method=["none"]),
    ]
    for c in clients:
        api("POST", "/api/client/", c)
    return {c["client_id"]: c for c in clients}


def wait_ready(h, proc, deadline):
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"glewlwyd exited with {proc.returncode}")
        try:
            st, _, _ = h.request("GET", "/config", timeout=2)
            if st == 200:
                return
        except (OSError, http.client.HTTPException):
            pass
        time.sleep(0.05)
    raise RuntimeError("glewlwyd did not answer in time")


def serve(a):
    t0 = time.time()
    d = os.path.abspath(a.state_dir or tempfile.mkdtemp(prefix="glewlwyd-"))
    os.makedirs(d, exist_ok=True)
    make_pki(d)
    init_db(d)
    scheme = "https" if a.tls else "http"
    proc = None
    for _attempt in range(5):                        # bounded retry if the free port is taken meanwhile
        port = a.port or free_port()
        write_conf(d, port, a.tls, a.log_level)
        base = f"{scheme}://127.0.0.1:{port}"
        h = Http(base, ca_file=os.path.join(d, "ca.pem"))
        proc = subprocess.Popen([GLEWLWYD, "--config-file=" + os.path.join(d, "glewlwyd.conf")],
                                stdin=subprocess.DEVNULL, stdout=open(os.path.join(d, "stdout.log"), "ab"),
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            wait_ready(h, proc, time.time() + 20)
            break
        except RuntimeError:
            if proc.poll() is None:
                proc.terminate()
                proc.wait(5)
            if a.port:
                raise
    else:
        raise RuntimeError("could not start glewlwyd")

    def stop(*_):
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
        sys.exit(0)
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    t_ready = time.time()

    plugin_base = f"{base}/api/{PLUGIN}"
    info = {
        "pid": proc.pid, "state_dir": d, "port": port, "base_url": base, "tls": a.tls,
        "issuer": plugin_base,
        "discovery": f"{plugin_base}/.well-known/openid-configuration",
        "token_endpoint": f"{plugin_base}/token",
        "mtls_token_endpoint": f"{plugin_base}/mtls/token" if a.mtls_aliases else f"{plugin_base}/token",
        "revocation_endpoint": f"{plugin_base}/revoke",
        "introspection_endpoint": f"{plugin_base}/introspect",
        "authorization_endpoint": f"{plugin_base}/auth",
        "device_authorization_endpoint": f"{plugin_base}/device_authorization",
        "userinfo_endpoint": f"{plugin_base}/userinfo",
        "jwks_uri": f"{plugin_base}/jwks",
        "client_assertion_aud": f"{plugin_base}/token",
        "ca_file": os.path.join(d, "ca.pem"),
        "user": {"username": USER, "password": USER_PASSWORD},
        "admin": {"username": ADMIN_USER, "password": ADMIN_PASSWORD},
        "scopes": ["openid"] + SCOPES, "resource": RESOURCE, "redirect_uri": REDIRECT_URI,
        "clients": {
            "secret": {"client_id": CLIENT_SECRET_ID, "client_secret": CLIENT_SECRET,
                       "auth": ["client_secret_basic", "client_secret_post"]},
            "pkjwt_rsa": {"client_id": CLIENT_PKJ_RSA, "auth": "private_key_jwt", "alg": "RS256",
                          "kid": "pkjwt-rsa-1", "key_file": os.path.join(d, "pkjwt-rsa.key")},
            "pkjwt_ec": {"client_id": CLIENT_PKJ_EC, "auth": "private_key_jwt", "alg": "ES256",
                         "kid": "pkjwt-ec-1", "key_file": os.path.join(d, "pkjwt-ec.key")},
            "mtls": {"client_id": CLIENT_MTLS, "auth": "tls_client_auth", "san_dns": CLIENT_MTLS_SAN_DNS,
                     "cert_file": os.path.join(d, "client.pem"), "key_file": os.path.join(d, "client.key")},
            "mtls_self_signed": {"client_id": CLIENT_SELF_MTLS, "auth": "self_signed_tls_client_auth",
                                 "cert_file": os.path.join(d, "selfsigned.pem"),
                                 "key_file": os.path.join(d, "selfsigned.key")},
            "public": {"client_id": CLIENT_PUBLIC, "auth": "none",
                       "dpop_key_file": os.path.join(d, "dpop-ec.key")},
        },
        "options": {"access_token_lifetime": a.access_token_lifetime,
                    "refresh_token_lifetime": a.refresh_token_lifetime,
                    "refresh_token_one_use": a.refresh_token_one_use, "dpop_nonce": a.dpop_nonce,
                    "mtls_aliases": a.mtls_aliases},
        "log_file": os.path.join(d, "glewlwyd.log"),
    }
    provision(h, info, d, a)
    info["startup_seconds"] = {"glewlwyd_answering": round(t_ready - t0, 2), "total": round(time.time() - t0, 2)}
    with open(os.path.join(d, "info.json"), "w") as f:
        json.dump(info, f, indent=1)
    print(json.dumps(info), flush=True)
    while proc.poll() is None:
        time.sleep(0.5)
    sys.exit(f"glewlwyd exited unexpectedly with {proc.returncode}")


# --------------------------------------------------------------------------- token helpers

def load_info(state_dir):
    with open(os.path.join(state_dir, "info.json")) as f:
        return json.load(f)


def client_auth(info, name, form, headers, endpoint=None):
    """Add client authentication for client `name` (key of info['clients']) to form/headers.
    Returns the Http object to use (with the TLS client cert for mTLS clients)."""
    c = info["clients"][name]
    cid = c["client_id"]
    h = Http(info["base_url"], ca_file=info["ca_file"])
    if c["auth"] == ["client_secret_basic", "client_secret_post"]:
        headers["Authorization"] = "Basic " + base64.b64encode(f"{cid}:{c['client_secret']}".encode()).decode()
    elif c["auth"] == "private_key_jwt":
        form["client_id"] = cid
        form["client_assertion_type"] = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
        form["client_assertion"] = client_assertion(c["key_file"], c["kid"], c["alg"], cid,
                                                    endpoint or info["client_assertion_aud"])
    elif c["auth"] in ("tls_client_auth", "self_signed_tls_client_auth"):
        form["client_id"] = cid
        h = Http(info["base_url"], ca_file=info["ca_file"], cert=c["cert_file"], key=c["key_file"])
    else:
        form["client_id"] = cid
    return h


def token_request(info, name, form, extra_headers=None, path=None):
    headers = dict(extra_headers or {})
    form = dict(form)
    h = client_auth(info, name, form, headers)
    default = info["token_endpoint"]
    if "tls_client_auth" in str(info["clients"][name]["auth"]):
        default = info["mtls_token_endpoint"]       # /mtls/token when started with --mtls-aliases
    p = path or urllib.parse.urlsplit(default).path
    st, hd, data = h.request("POST", p, form=form, headers=headers)
    return st, hd, data


def password_grant(info, name, scope):
    st, _, data = token_request(info, name, {"grant_type": "password", "username": info["user"]["username"],
                                             "password": info["user"]["password"], "scope": scope})
    check(st, data, "password grant")
    return json.loads(data)


def consent(info, name, scope):
    """Logs alice in and grants client `name` the scopes, as her browser would: (Http, client_id, cookie)."""
    h = Http(info["base_url"], ca_file=info["ca_file"])
    cid = info["clients"][name]["client_id"]
    cookie = login(h, info["user"]["username"], info["user"]["password"])
    st, _, data = h.request("PUT", f"/api/auth/grant/{urllib.parse.quote(cid)}", {"scope": scope},
                            headers={"Cookie": cookie})
    check(st, data, "grant consent")
    return h, cid, cookie


def code_grant(info, name, scope, token_headers=None, extra_form=None, auth_params=None):
    """Authorization-code flow without a browser: login API -> grant consent -> /auth -> /token.
    token_headers (e.g. {"DPoP": proof}) and extra_form go to the /token request, auth_params
    (e.g. {"resource": ...}, which glewlwyd only honours at /auth) to the authorization request."""
    h, cid, cookie = consent(info, name, scope)
    verifier = secrets.token_urlsafe(48)
    challenge = b64u(hashlib.sha256(verifier.encode()).digest())
    q = urllib.parse.urlencode({"response_type": "code", "client_id": cid, "redirect_uri": info["redirect_uri"],
                                "scope": scope, "state": "s", "nonce": secrets.token_hex(8),
                                "code_challenge": challenge, "code_challenge_method": "S256",
                                "g_continue": "",   # glewlwyd: skip the login page, session is ready
                                **(auth_params or {})})
    st, hd, data = h.request("GET", urllib.parse.urlsplit(info["authorization_endpoint"]).path + "?" + q,
                             headers={"Cookie": cookie})
    loc = hd.get("Location", "")
    code = urllib.parse.parse_qs(urllib.parse.urlsplit(loc).query).get("code", [None])[0]
    if st != 302 or not code:
        raise RuntimeError(f"/auth: HTTP {st} Location={loc!r} {data[:300]!r}")
    form = {"grant_type": "authorization_code", "code": code, "redirect_uri": info["redirect_uri"],
            "code_verifier": verifier}
    form.update(extra_form or {})
    st, _, data = token_request(info, name, form, extra_headers=token_headers)
    check(st, data, "code grant")
    return json.loads(data)


def approve_device(info, name, user_code, scope):
    """Act as the user on the verification URI: login API -> grant consent -> /device?code=..&g_continue."""
    h, cid, cookie = consent(info, name, scope)
    q = urllib.parse.urlencode({"code": user_code, "g_continue": ""})
    st, hd, data = h.request("GET", f"/api/{PLUGIN}/device?{q}", headers={"Cookie": cookie})
    loc = hd.get("Location", "")
    if st != 302 or "deviceComplete" not in loc:
        raise RuntimeError(f"device approval: HTTP {st} Location={loc!r}")
    return loc


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve")
    s.add_argument("--state-dir")
    s.add_argument("--port", type=int, default=0)
    s.add_argument("--no-tls", dest="tls", action="store_false", help="plain http (no mTLS client auth)")
    s.add_argument("--access-token-lifetime", type=int, default=3600)
    s.add_argument("--refresh-token-lifetime", type=int, default=1209600)
    s.add_argument("--refresh-token-one-use", choices=["never", "always", "client-driven"], default="always",
                   help="'always' = rotation: every refresh returns a new refresh token, the old one dies")
    s.add_argument("--dpop-nonce", action="store_true", help="oauth-dpop-nonce-mandatory (DPoP-Nonce challenges)")
    s.add_argument("--mtls-aliases", action="store_true",
                   help="client-cert-use-endpoint-aliases: mTLS auth only on /api/oidc/mtls/token etc.")
    s.add_argument("--device-interval", type=int, default=5)
    s.add_argument("--device-code-lifetime", type=int, default=600)
    s.add_argument("--log-level", default="INFO", choices=["NONE", "ERROR", "WARNING", "INFO", "DEBUG"])
    t = sub.add_parser("approve-device")
    t.add_argument("--state-dir", required=True)
    t.add_argument("--client", default="secret")
    t.add_argument("--user-code", required=True)
    t.add_argument("--scope", default="openid read offline_access")
    for name in ("token", "code-token"):
        t = sub.add_parser(name)
        t.add_argument("--state-dir", required=True)
        t.add_argument("--client", default="secret", help="key of info.json 'clients' (secret, pkjwt_rsa, ...)")
        t.add_argument("--scope", default="openid read write offline_access")
    a = ap.parse_args()
    if a.cmd == "serve":
        serve(a)
    elif a.cmd == "approve-device":
        print(approve_device(load_info(a.state_dir), a.client, a.user_code, a.scope))
    elif a.cmd == "token":
        print(json.dumps(password_grant(load_info(a.state_dir), a.client, a.scope)))
    else:
        print(json.dumps(code_grant(load_info(a.state_dir), a.client, a.scope)))


if __name__ == "__main__":
    main()

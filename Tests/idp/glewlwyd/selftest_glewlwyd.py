#!/usr/bin/env python3
"""Exercise a running glewlwyd_server.py instance with real requests and print what happened.

    glewlwyd_server.py serve --state-dir D &          # wait for its JSON line
    selftest_glewlwyd.py --state-dir D                # one "PASS/FAIL name: observation" line per check

With a server started with --dpop-nonce, the DPoP checks expect the nonce dance instead.
Stdlib only; exit status 1 if any check failed.
"""
import argparse
import base64
import hashlib
import json
import os
import sys
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import glewlwyd_server as g  # noqa: E402

RESULTS = []


def record(name, ok, obs):
    RESULTS.append((name, ok, obs))
    print(("PASS " if ok else "FAIL ") + name + ": " + (obs if isinstance(obs, str) else json.dumps(obs)), flush=True)


def jwt_claims(tok):
    p = tok.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(p + "=" * (-len(p) % 4)))


def body(data):
    try:
        return json.loads(data)
    except ValueError:
        return data.decode(errors="replace")


def path(url):
    return urllib.parse.urlsplit(url).path


def pwd(info, client, scope="openid read write offline_access", extra=None, headers=None):
    form = {"grant_type": "password", "username": info["user"]["username"],
            "password": info["user"]["password"], "scope": scope}
    form.update(extra or {})
    url = info["mtls_token_endpoint"] if client.startswith("mtls") else info["token_endpoint"]
    return g.token_request(info, client, form, extra_headers=headers, path=path(url))


def refresh(info, client, rt, extra=None, headers=None, url=None):
    form = {"grant_type": "refresh_token", "refresh_token": rt}
    form.update(extra or {})
    return g.token_request(info, client, form, extra_headers=headers, path=path(url) if url else None)


def summary(st, hd, data, keys=("token_type", "scope", "expires_in", "error", "error_description")):
    b = body(data)
    out = {"status": st}
    if isinstance(b, dict):
        out.update({k: b[k] for k in keys if k in b})
        out["has_refresh_token"] = "refresh_token" in b
    else:
        out["body"] = b[:200]
    for h in ("DPoP-Nonce", "WWW-Authenticate"):
        if hd.get(h):
            out[h] = hd.get(h)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--state-dir", required=True)
    a = ap.parse_args()
    info = g.load_info(a.state_dir)
    nonce_mode = info["options"]["dpop_nonce"]
    h = g.Http(info["base_url"], ca_file=info["ca_file"])

    # ---- 1. discovery
    st, _, data = h.request("GET", path(info["discovery"]))
    d = body(data)
    record("discovery", st == 200 and d.get("issuer") == info["issuer"],
           {k: d.get(k) for k in ("issuer", "token_endpoint", "revocation_endpoint", "introspection_endpoint",
                                  "device_authorization_endpoint", "grant_types_supported",
                                  "token_endpoint_auth_methods_supported", "dpop_signing_alg_values_supported",
                                  "mtls_endpoint_aliases", "tls_client_certificate_bound_access_tokens")})

    # ---- 1. refresh grant (client_secret_basic), rotation, replay
    st, hd, data = pwd(info, "secret")
    t0 = body(data)
    record("password grant (client_secret_basic)", st == 200 and "refresh_token" in t0, summary(st, hd, data))
    st, hd, data = refresh(info, "secret", t0["refresh_token"])
    t1 = body(data)
    rotated = isinstance(t1, dict) and "refresh_token" in t1 and t1["refresh_token"] != t0["refresh_token"]
    record("refresh grant", st == 200, dict(summary(st, hd, data), rotated=rotated))
    st, hd, data = refresh(info, "secret", t0["refresh_token"])
    if info["options"]["refresh_token_one_use"] == "always":
        record("replay of rotated-away refresh token", st != 200, summary(st, hd, data))
    else:
        record("reuse of the refresh token (no rotation)", st == 200, summary(st, hd, data))
    if rotated:
        st, hd, data = refresh(info, "secret", t1["refresh_token"])
        record("newest refresh token after a replay (one-use chain broken?)", True, summary(st, hd, data))

    # ---- 5. narrower scope and resource on refresh
    st, hd, data = pwd(info, "secret")
    t = body(data)
    st, hd, data = refresh(info, "secret", t["refresh_token"], {"scope": "read"})
    b = body(data)
    at_scope = jwt_claims(b["access_token"]).get("scope") if st == 200 else None
    # glewlwyd 2.7.5 ignores `scope` on refresh (the grant's full scope comes back)
    record("refresh with narrower scope=read (glewlwyd ignores it)", st == 200,
           dict(summary(st, hd, data), access_token_scope=at_scope))
    rt = b.get("refresh_token", t["refresh_token"]) if isinstance(b, dict) else t["refresh_token"]
    st, hd, data = refresh(info, "secret", rt, {"scope": "read write"})
    record("refresh asking more than the grant had (scope=read write after narrowing)", True, summary(st, hd, data))
    st, hd, data = pwd(info, "secret")
    t = body(data)
    st, hd, data = refresh(info, "secret", t["refresh_token"], {"scope": "openid read write offline_access admin"})
    record("refresh with a scope outside the grant (glewlwyd ignores it)", st == 200, summary(st, hd, data))
    st, hd, data = pwd(info, "secret", scope="read offline_access", extra={"resource": info["resource"]})
    b = body(data)
    aud = jwt_claims(b["access_token"]).get("aud") if st == 200 else None
    record("password grant with resource (glewlwyd ignores it)", st == 200,
           dict(summary(st, hd, data), access_token_aud=aud))
    # glewlwyd honours `resource` only at /auth (stored with the code and the refresh token)
    t = g.code_grant(info, "secret", "read offline_access", auth_params={"resource": info["resource"]})
    aud = jwt_claims(t["access_token"]).get("aud")
    record("code flow with resource at /auth", aud == info["resource"], {"access_token_aud": aud})
    st, hd, data = refresh(info, "secret", t["refresh_token"], {"resource": info["resource"]})
    b = body(data)
    aud = jwt_claims(b["access_token"]).get("aud") if st == 200 else None
    record("refresh with resource (RFC 8707) = the one granted", st == 200 and aud == info["resource"],
           dict(summary(st, hd, data), access_token_aud=aud))
    rt = b.get("refresh_token", t["refresh_token"]) if isinstance(b, dict) else t["refresh_token"]
    st, hd, data = refresh(info, "secret", rt)
    b = body(data)
    aud = jwt_claims(b["access_token"]).get("aud") if st == 200 else None
    record("refresh without resource after a resource grant", st == 200, dict(summary(st, hd, data), access_token_aud=aud))
    rt = b.get("refresh_token", rt) if isinstance(b, dict) else rt
    st, hd, data = refresh(info, "secret", rt, {"resource": "https://other.example/"})
    record("refresh with a resource that was not granted", st != 200, summary(st, hd, data))
    st, hd, data = pwd(info, "secret", scope="read offline_access")
    t = body(data)
    st, hd, data = refresh(info, "secret", t["refresh_token"], {"resource": info["resource"]})
    record("refresh with resource when the grant had none (password grant)", True, summary(st, hd, data))

    # ---- 1. revocation (RFC 7009)
    st, hd, data = pwd(info, "secret")
    t = body(data)
    hh = {"Authorization": "Basic " + base64.b64encode(
        f"{info['clients']['secret']['client_id']}:{info['clients']['secret']['client_secret']}".encode()).decode()}
    st, hd, data = h.request("POST", path(info["revocation_endpoint"]),
                             form={"token": t["refresh_token"], "token_type_hint": "refresh_token"}, headers=hh)
    record("revoke refresh token (client_secret_basic)", st == 200, {"status": st, "body": body(data)})
    st, hd, data = refresh(info, "secret", t["refresh_token"])
    record("refresh after revocation", st != 200, summary(st, hd, data))
    st, hd, data = h.request("POST", path(info["introspection_endpoint"]), form={"token": t["access_token"]}, headers=hh)
    record("introspect access token after refresh-token revocation", st == 200,
           {"status": st, "active": body(data).get("active") if st == 200 else body(data)})
    st, hd, data = h.request("POST", path(info["revocation_endpoint"]), form={"token": "not-a-token"}, headers=hh)
    record("revoke an unknown token (RFC 7009 says 200)", True, {"status": st, "body": body(data)})
    st, hd, data = pwd(info, "pkjwt_ec")
    t = body(data)
    form = {"token": t["refresh_token"]}
    hx = g.client_auth(info, "pkjwt_ec", form, {}, endpoint=info["revocation_endpoint"])
    st, hd, data = hx.request("POST", path(info["revocation_endpoint"]), form=form)
    record("revoke with private_key_jwt (aud=revocation endpoint)", st == 200, {"status": st, "body": body(data)})

    # ---- 1. authorization code flow + device flow
    try:
        t = g.code_grant(info, "secret", "openid read offline_access")
        record("authorization code flow (programmatic)", "refresh_token" in t, {"token_type": t.get("token_type"),
                                                                              "scope": t.get("scope")})
    except Exception as e:  # noqa: BLE001
        record("authorization code flow (programmatic)", False, str(e))
    form = {"scope": "openid read offline_access"}
    hx = g.client_auth(info, "secret", form, hh := {})
    st, hd, data = hx.request("POST", path(info["device_authorization_endpoint"]), form=form, headers=hh)
    dv = body(data)
    record("device authorization request", st == 200, dv if st != 200 else
           {k: dv.get(k) for k in ("verification_uri", "verification_uri_complete", "expires_in", "interval")})
    if st == 200:
        grant = {"grant_type": "urn:ietf:params:oauth:grant-type:device_code", "device_code": dv["device_code"]}
        st, hd, data = g.token_request(info, "secret", grant)
        record("device poll before approval", st != 200, summary(st, hd, data))
        st, hd, data = g.token_request(info, "secret", grant)
        record("device poll again at once (slow_down?)", True, summary(st, hd, data))
        try:
            g.approve_device(info, "secret", dv["user_code"], "openid read offline_access")
            time.sleep(dv.get("interval", 5) + 0.5)
            st, hd, data = g.token_request(info, "secret", grant)
            record("device poll after approval", st == 200, summary(st, hd, data))
        except Exception as e:  # noqa: BLE001
            record("device approval", False, str(e))

    # ---- 2. private_key_jwt
    for name in ("pkjwt_rsa", "pkjwt_ec"):
        c = info["clients"][name]
        st, hd, data = pwd(info, name)
        t = body(data)
        record(f"password grant private_key_jwt {c['alg']}", st == 200, summary(st, hd, data))
        if st == 200:
            st, hd, data = refresh(info, name, t["refresh_token"])
            record(f"refresh grant private_key_jwt {c['alg']} (aud=token endpoint)", st == 200, summary(st, hd, data))
    c = info["clients"]["pkjwt_ec"]
    st, hd, data = pwd(info, "pkjwt_ec")
    rt = body(data)["refresh_token"]
    for label, aud in (("issuer", info["issuer"]), ("[token endpoint] (array)", [info["token_endpoint"]]),
                       ("token endpoint + '/'", info["token_endpoint"] + "/")):
        form = {"grant_type": "refresh_token", "refresh_token": rt, "client_id": c["client_id"],
                "client_assertion_type": "urn:ietf:params:oauth:client-assertion-type:jwt-bearer",
                "client_assertion": g.client_assertion(c["key_file"], c["kid"], c["alg"], c["client_id"], aud)}
        st, hd, data = h.request("POST", path(info["token_endpoint"]), form=form)
        record(f"private_key_jwt aud={label}", True, summary(st, hd, data))
        if st == 200:
            rt = body(data).get("refresh_token", rt)
    assertion = g.client_assertion(c["key_file"], c["kid"], c["alg"], c["client_id"], info["token_endpoint"])
    codes = []
    for _ in range(2):
        form = {"grant_type": "refresh_token", "refresh_token": rt, "client_id": c["client_id"],
                "client_assertion_type": "urn:ietf:params:oauth:client-assertion-type:jwt-bearer",
                "client_assertion": assertion}
        st, hd, data = h.request("POST", path(info["token_endpoint"]), form=form)
        codes.append(st)
        if st == 200:
            rt = body(data).get("refresh_token", rt)
    record("private_key_jwt assertion replay (same jti twice)", codes[1] != 200, {"statuses": codes})
    form = {"grant_type": "refresh_token", "refresh_token": rt, "client_id": c["client_id"],
            "client_assertion_type": "urn:ietf:params:oauth:client-assertion-type:jwt-bearer",
            "client_assertion": g.client_assertion(info["clients"]["pkjwt_rsa"]["key_file"], c["kid"], "RS256",
                                                   c["client_id"], info["token_endpoint"])}
    st, hd, data = h.request("POST", path(info["token_endpoint"]), form=form)
    record("private_key_jwt signed with the wrong key", st != 200, summary(st, hd, data))

    # ---- 3. mutual TLS
    if info["tls"]:
        for name in ("mtls", "mtls_self_signed"):
            st, hd, data = pwd(info, name)
            t = body(data)
            cnf = jwt_claims(t["access_token"]).get("cnf") if st == 200 else None
            record(f"password grant {info['clients'][name]['auth']}", st == 200, dict(summary(st, hd, data), cnf=cnf))
            if st == 200:
                st, hd, data = refresh(info, name, t["refresh_token"], url=info["mtls_token_endpoint"])
                record(f"refresh grant {info['clients'][name]['auth']}", st == 200, summary(st, hd, data))
        form = {"grant_type": "password", "username": "alice", "password": "alice-pw", "scope": "read",
                "client_id": info["clients"]["mtls"]["client_id"]}
        st, hd, data = h.request("POST", path(info["mtls_token_endpoint"]), form=form)
        record("tls_client_auth client without a certificate", st != 200, summary(st, hd, data))
        hx = g.Http(info["base_url"], ca_file=info["ca_file"], cert=info["clients"]["mtls_self_signed"]["cert_file"],
                    key=info["clients"]["mtls_self_signed"]["key_file"])
        st, hd, data = hx.request("POST", path(info["mtls_token_endpoint"]), form=form)
        record("tls_client_auth client with another (self-signed) certificate", st != 200, summary(st, hd, data))

    # ---- 4. DPoP (public client, code flow + PKCE, then refresh)
    pub = info["clients"]["public"]
    key = pub["dpop_key_file"]
    jwk = g.jwk_from_key(key, "dpop", "ES256")
    tok_url = info["token_endpoint"]
    nonce = None
    proof = g.dpop_proof(key, jwk, "POST", tok_url)
    try:
        t = g.code_grant(info, "public", "openid read offline_access", token_headers={"DPoP": proof})
        record("code flow + DPoP proof (public client)", t.get("token_type", "").lower() == "dpop",
               {"token_type": t.get("token_type"), "cnf": jwt_claims(t["access_token"]).get("cnf"),
                "has_refresh_token": "refresh_token" in t})
    except Exception as e:  # noqa: BLE001
        record("code flow + DPoP proof (public client)", nonce_mode, str(e)[:300])
        t = None
    if nonce_mode:
        # first call without nonce: expect 400 use_dpop_nonce + DPoP-Nonce header, then retry
        st, hd, data = pwd(info, "secret", headers={"DPoP": g.dpop_proof(key, jwk, "POST", tok_url)})
        nonce = hd.get("DPoP-Nonce")
        record("DPoP without nonce when nonce is mandatory", st == 400 and nonce is not None, summary(st, hd, data))
        st, hd, data = pwd(info, "secret", headers={"DPoP": g.dpop_proof(key, jwk, "POST", tok_url, nonce=nonce)})
        t = body(data)
        record("DPoP with the server's nonce (confidential client, password grant)", st == 200, summary(st, hd, data))
        client_for_refresh = "secret"
        if hd.get("DPoP-Nonce"):
            nonce = hd.get("DPoP-Nonce")
    else:
        client_for_refresh = "public"
        st, hd, data = pwd(info, "secret", headers={"DPoP": g.dpop_proof(key, jwk, "POST", tok_url)})
        record("password grant + DPoP (confidential client)", st == 200, summary(st, hd, data))
    if isinstance(t, dict) and "refresh_token" in t:
        rt = t["refresh_token"]
        st, hd, data = refresh(info, client_for_refresh, rt,
                               headers={"DPoP": g.dpop_proof(key, jwk, "POST", tok_url, nonce=nonce)})
        b = body(data)
        record("refresh with DPoP proof (same key)", st == 200, dict(summary(st, hd, data),
               cnf=jwt_claims(b["access_token"]).get("cnf") if st == 200 else None))
        if st == 200:
            rt = b.get("refresh_token", rt)
            if hd.get("DPoP-Nonce"):
                nonce = hd.get("DPoP-Nonce")
        st, hd, data = refresh(info, client_for_refresh, rt)
        record("refresh of a DPoP-bound grant WITHOUT a proof", st != 200, summary(st, hd, data))
        other = os.path.join(info["state_dir"], "dpop-other.key")
        if not os.path.exists(other):
            g.run(["openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", other])
        ojwk = g.jwk_from_key(other, "other", "ES256")
        st, hd, data = refresh(info, client_for_refresh, rt,
                               headers={"DPoP": g.dpop_proof(other, ojwk, "POST", tok_url, nonce=nonce)})
        record("refresh of a DPoP-bound grant with ANOTHER key", st != 200, summary(st, hd, data))
        st, hd, data = refresh(info, client_for_refresh, rt,
                               headers={"DPoP": g.dpop_proof(key, jwk, "POST", tok_url + "x", nonce=nonce)})
        record("refresh with a proof for the wrong htu", st != 200, summary(st, hd, data))
        # userinfo with the DPoP-bound access token
        st, hd, data = refresh(info, client_for_refresh, rt,
                               headers={"DPoP": g.dpop_proof(key, jwk, "POST", tok_url, nonce=nonce)})
        if st == 200:
            b = body(data)
            if hd.get("DPoP-Nonce"):
                nonce = hd.get("DPoP-Nonce")
            at = b["access_token"]
            ath = g.b64u(hashlib.sha256(at.encode()).digest())
            ui = info["userinfo_endpoint"]
            st, hd, data = h.request("GET", path(ui), headers={
                "Authorization": "DPoP " + at, "DPoP": g.dpop_proof(key, jwk, "GET", ui, nonce=nonce, ath=ath)})
            record("userinfo with DPoP-bound token", st == 200, summary(st, hd, data, keys=("sub", "error")))
            st, hd, data = h.request("GET", path(ui), headers={"Authorization": "Bearer " + at})
            record("userinfo with DPoP-bound token as Bearer (no proof)", st != 200, summary(st, hd, data))

    failed = [r for r in RESULTS if not r[1]]
    print(f"{len(RESULTS) - len(failed)}/{len(RESULTS)} passed", flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()

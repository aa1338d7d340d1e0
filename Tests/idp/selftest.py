#!/usr/bin/env python3
"""End-to-end check of the test IdP and the fault proxy; run with the venv python.

    selftest.py [--bench N] [--parallel P]

Starts its own servers on free ports in a temp dir and stops them all on exit.
Prints one line per check and ends with `N passed, N failed`.
"""
import argparse
import base64
import hashlib
import http.client
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
PY = sys.executable
BASIC = "Basic " + base64.b64encode(b"tokend-test:tokend-test-secret").decode()
results = {"passed": 0, "failed": 0}
children = []


def check(name, ok, detail=""):
    results["passed" if ok else "failed"] += 1
    print(f"{'ok  ' if ok else 'FAIL'} {name}" + (f"  [{detail}]" if detail and not ok else ""), flush=True)
    return ok


def start(args, timeout=60):
    """Start a server that prints `READY <port>`; return (proc, port)."""
    p = subprocess.Popen([PY, *args], stdout=subprocess.PIPE, text=True, cwd=HERE)
    children.append(p)
    box = []
    t = threading.Thread(target=lambda: box.append(p.stdout.readline()), daemon=True)
    t.start()
    t.join(timeout)
    if not box or not box[0].startswith("READY "):
        raise RuntimeError(f"{args[:2]} did not print READY: {box}")
    return p, int(box[0].split()[1])


def stop(p):
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
    try:
        return p.wait(15)
    except subprocess.TimeoutExpired:
        p.kill()
        return p.wait()


def idp(*args):
    return subprocess.run([PY, str(HERE / "idp.py"), *args], check=True, capture_output=True, text=True).stdout


def mint(state, n=1):
    return [json.loads(line) for line in idp("mint", "--state-dir", state, "--count", str(n)).splitlines()]


def request(port, method, path, body=b"", headers=None, tls=None, timeout=10):
    c = (http.client.HTTPSConnection("127.0.0.1", port, context=tls, timeout=timeout) if tls
         else http.client.HTTPConnection("127.0.0.1", port, timeout=timeout))
    try:
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        return r.status, r.read(), dict(r.getheaders())
    finally:
        c.close()


def refresh(port, rt, tls=None, conn=None):
    body = f"grant_type=refresh_token&refresh_token={rt}"
    hdrs = {"Authorization": BASIC, "Content-Type": "application/x-www-form-urlencoded"}
    if conn is not None:  # keep-alive connection (benchmark)
        conn.request("POST", "/o/token/", body=body, headers=hdrs)
        r = conn.getresponse()
        return r.status, json.loads(r.read())
    status, data, _ = request(port, "POST", "/o/token/", body, hdrs, tls)
    return status, json.loads(data)


def serve(state, *extra):
    return start(["idp.py", "serve", "--port", "0", "--state-dir", state, *extra])


def test_plain(tmp, bench, parallel):
    state = str(tmp / "plain")
    t0 = time.monotonic()
    proc, port = serve(state)
    print(f"     (fresh serve ready in {time.monotonic() - t0:.1f}s)")
    toks = mint(state, 3)
    check("mint prints 3 token responses", len(toks) == 3 and all(
        set(t) == {"access_token", "refresh_token", "expires_in", "token_type", "scope"} for t in toks))
    st, new = refresh(port, toks[0]["refresh_token"])
    check("refresh grant 200 with a new refresh token", st == 200 and new["refresh_token"] != toks[0]["refresh_token"],
          f"{st} {new}")
    st, err = refresh(port, toks[0]["refresh_token"])
    check("old refresh token rejected (grace 0)", st == 400 and err == {"error": "invalid_grant"}, f"{st} {err}")
    st, _ = refresh(port, new["refresh_token"])
    check("rotated refresh token works", st == 200)
    idp("revoke", "--state-dir", state, "--refresh-token", toks[1]["refresh_token"])
    st, err = refresh(port, toks[1]["refresh_token"])
    check("revoked refresh token -> invalid_grant", st == 400 and err["error"] == "invalid_grant", f"{st} {err}")
    st, data, _ = request(port, "POST", "/o/token/", f"grant_type=refresh_token&refresh_token={toks[2]['refresh_token']}",
                          {"Authorization": "Basic " + base64.b64encode(b"tokend-test:wrong").decode(),
                           "Content-Type": "application/x-www-form-urlencoded"})
    check("wrong client secret -> 401 invalid_client", st == 401 and json.loads(data)["error"] == "invalid_client")
    n = int(idp("count-posts", "--state-dir", state))
    check("count-posts sees every token POST", n == 5, f"{n}")

    # Headless authorization code + PKCE (S256)
    verifier = "v" * 43
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).decode().rstrip("=")
    redirect = "http://127.0.0.1:4711/callback"
    st, _, h = request(port, "GET", f"/o/authorize/?response_type=code&client_id=tokend-public&state=s1"
                       f"&redirect_uri={redirect}&code_challenge={challenge}&code_challenge_method=S256")
    code = h.get("Location", "").partition("code=")[2].partition("&")[0]
    st2, data, _ = request(port, "POST", "/o/token/", f"grant_type=authorization_code&client_id=tokend-public"
                           f"&code={code}&redirect_uri={redirect}&code_verifier={verifier}",
                           {"Content-Type": "application/x-www-form-urlencoded"})
    check("authorization code + PKCE, headless (public client)", st == 302 and st2 == 200
          and "refresh_token" in json.loads(data), f"{st} {h.get('Location')} {st2} {data[:200]}")

    # Same refresh token sent 4x in parallel: how many distinct answers?
    rt = mint(state)[0]["refresh_token"]
    with ThreadPoolExecutor(4) as ex:
        outs = list(ex.map(lambda _: refresh(port, rt), range(4)))
    pairs = {o[1].get("refresh_token") for o in outs if o[0] == 200}
    print(f"     (4 concurrent duplicate refreshes: statuses {sorted(o[0] for o in outs)}, "
          f"{len(pairs)} distinct new refresh token(s))")

    # mint while serve runs and requests hit the DB
    toks = mint(state, 20)
    check("mint works while serving (20 more)", len(toks) == 20)

    if bench:
        chains = mint(state, parallel)
        per = bench // parallel

        def run(tok):
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            rt, bad = tok["refresh_token"], 0
            for _ in range(per):
                st, data = refresh(port, rt, conn=c)
                if st == 200:
                    rt = data["refresh_token"]
                else:
                    bad += 1
            c.close()
            return bad
        t0 = time.monotonic()
        with ThreadPoolExecutor(parallel) as ex:
            bad = sum(ex.map(run, chains))
        dt = time.monotonic() - t0
        check(f"benchmark: {per * parallel} refreshes, {parallel} parallel, all 200", bad == 0, f"{bad} failed")
        print(f"     (benchmark: {per * parallel / dt:.0f} grants/s, {dt:.2f}s)")
    check("serve exits 0 on SIGTERM", stop(proc) == 0)


def test_grace_and_reuse(tmp):
    state = str(tmp / "grace")
    proc, port = serve(state, "--refresh-grace", "5")
    rt = mint(state)[0]["refresh_token"]
    st1, a = refresh(port, rt)
    st2, b = refresh(port, rt)
    check("grace 5: replay of previous token -> same new pair", st1 == st2 == 200 and a == b, f"{st2} {a} {b}")
    stop(proc)

    state = str(tmp / "reuse")
    proc, port = serve(state, "--reuse-protection")
    rt = mint(state)[0]["refresh_token"]
    _, a = refresh(port, rt)
    st, _ = refresh(port, rt)
    st2, err = refresh(port, a["refresh_token"])
    check("reuse protection: replay revokes the whole family", st == 400 and st2 == 400, f"{st} {st2} {err}")
    stop(proc)

    state = str(tmp / "norotate")
    proc, port = serve(state, "--no-rotate", "--access-token-lifetime", "7")
    rt = mint(state)[0]["refresh_token"]
    st, a = refresh(port, rt)
    check("--no-rotate keeps the refresh token; lifetime applies",
          st == 200 and a["refresh_token"] == rt and a["expires_in"] == 7, f"{st} {a}")
    stop(proc)


def test_tls_oidc_device(tmp):
    certs = tmp / "certs"
    idp("make-ca", "--out", str(certs))
    state = str(tmp / "tls")
    proc, port = serve(state, "--tls-cert", str(certs / "server.pem"), "--tls-key", str(certs / "server.key"),
                       "--oidc", "--device-flow")
    ctx = ssl.create_default_context(cafile=str(certs / "ca.pem"))
    rt = mint(state)[0]["refresh_token"]
    st, a = refresh(port, rt, tls=ctx)
    check("TLS refresh verified against ca.pem", st == 200, f"{st} {a}")
    st, data, _ = request(port, "GET", "/o/.well-known/openid-configuration", tls=ctx)
    check("OIDC discovery over TLS", st == 200 and json.loads(data)["issuer"].startswith("https://127.0.0.1"))
    st, data, _ = request(port, "GET", "/o/.well-known/jwks.json", tls=ctx)
    check("JWKS has a key", st == 200 and len(json.loads(data)["keys"]) == 1)
    st, data, _ = request(port, "POST", "/o/device-authorization/", "client_id=tokend-device&scope=read",
                          {"Content-Type": "application/x-www-form-urlencoded"}, tls=ctx)
    dev = json.loads(data)
    check("device authorization", st == 200 and "user_code" in dev, f"{st} {data[:200]}")
    if st == 200:
        form = {"Content-Type": "application/x-www-form-urlencoded"}
        poll = (f"grant_type=urn:ietf:params:oauth:grant-type:device_code"
                f"&device_code={dev['device_code']}&client_id=tokend-device")
        st, data, _ = request(port, "POST", "/o/token/", poll, form, tls=ctx)
        check("device poll before approval -> authorization_pending",
              st == 400 and json.loads(data)["error"] == "authorization_pending", f"{st} {data[:200]}")
        idp("approve-device", "--state-dir", state, "--user-code", dev["user_code"])
        st, data, _ = request(port, "POST", "/o/token/", poll, form, tls=ctx)
        check("device poll after approve-device -> tokens", st == 200 and "refresh_token" in json.loads(data),
              f"{st} {data[:200]}")
    stop(proc)


def test_proxy(tmp):
    state = str(tmp / "proxy")
    iproc, iport = serve(state)
    pproc, port = start(["faultproxy.py", "--listen", "0", "--upstream", str(iport)])

    def fault(**f):
        request(port, "POST", "/__fault", json.dumps(f))

    def stats():
        return json.loads(request(port, "GET", "/__stats")[1])

    toks = mint(state, 4)
    st, a = refresh(port, toks[0]["refresh_token"])
    check("proxy pass: refresh works", st == 200)
    fault(mode="status:503", retry_after=2, times=1)
    st, body, h = request(port, "POST", "/o/token/", "x=1")
    check("proxy status:503 + Retry-After, then back to pass", st == 503 and h.get("Retry-After") == "2"
          and refresh(port, a["refresh_token"])[0] == 200)
    fault(mode="status:429")
    check("proxy status:429", request(port, "POST", "/o/token/")[0] == 429)
    fault(mode="malformed_json")
    st, body, _ = request(port, "POST", "/o/token/")
    try:
        json.loads(body)
        bad = False
    except ValueError:
        bad = True
    check("proxy malformed_json", st == 200 and bad)
    fault(mode="no_access_token")
    check("proxy no_access_token", json.loads(request(port, "POST", "/o/token/")[1]) == {"token_type": "Bearer"})
    fault(mode="html")
    st, body, h = request(port, "POST", "/o/token/")
    check("proxy html", st == 500 and h["Content-Type"].startswith("text/html"))
    fault(mode="reset")
    before = int(idp("count-posts", "--state-dir", state))
    try:
        refresh(port, toks[1]["refresh_token"])
        check("proxy reset: client sees a broken response", False)
    except (ConnectionError, http.client.HTTPException, ValueError) as e:
        check("proxy reset: client sees a broken response", True)
        print(f"     (reset -> {type(e).__name__}: {e})")
    after = int(idp("count-posts", "--state-dir", state))
    st, _ = (fault(mode="pass"), refresh(port, toks[1]["refresh_token"]))[1]
    check("proxy reset: grant happened upstream, retry with old token -> 400", after == before + 1 and st == 400,
          f"{before} {after} {st}")
    fault(mode="slow:1")
    t0 = time.monotonic()
    st, _ = refresh(port, toks[2]["refresh_token"])
    check("proxy slow:1", st == 200 and time.monotonic() - t0 >= 1)
    fault(mode="hang")
    request(port, "POST", "/__stats/reset")
    errs = []

    def hang_one(_):
        try:
            request(port, "POST", "/o/token/", "x=1", timeout=1)
        except (socket.timeout, TimeoutError) as e:
            errs.append(e)
    with ThreadPoolExecutor(3) as ex:
        list(ex.map(hang_one, range(3)))
    s = stats()
    check("proxy hang: 3 clients time out; max_inflight 3", len(errs) == 3 and s["max_inflight"] == 3
          and s["token_posts"] == 3, f"{s} {errs}")
    fault(mode="pass")
    time.sleep(0.2)
    check("proxy inflight back to 0 after clients gave up", stats()["inflight"] == 0, f"{stats()}")
    check("faultproxy exits 0 on SIGTERM", stop(pproc) == 0)
    stop(iproc)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", type=int, default=0, help="refresh grants to time (0 = skip)")
    ap.add_argument("--parallel", type=int, default=4)
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="tokend-idp-selftest-"))
    try:
        test_plain(tmp, a.bench, a.parallel)
        test_grace_and_reuse(tmp)
        test_tls_oidc_device(tmp)
        test_proxy(tmp)
    except Exception as e:  # a crash is a failure, never a hang
        check(f"unexpected {type(e).__name__}: {e}", False)
    finally:
        for p in children:
            stop(p)
        if not os.environ.get("KEEP_TMP"):
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"{results['passed']} passed, {results['failed']} failed")
    sys.exit(1 if results["failed"] else 0)


if __name__ == "__main__":
    main()

"""Shared pieces of tokend's Python benchmarks (stdlib only).

Starting and stopping tokend, a small pipelined Varlink client, /proc readings (RSS, CPU
time), percentiles and result files. Every wait is bounded; every process started here is
stopped by `Processes.stop_all()` (the scripts call it in `finally`).
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent.parent
REPO_DIR = BENCH_DIR.parent
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def env_path(name, default):
    return Path(os.environ.get(name) or default)


def tokend_bin():
    return env_path("TOKEND_BIN", REPO_DIR / ".build-release/dist/tokend")


def storegen_bin():
    return env_path("STOREGEN_BIN", REPO_DIR / "Benchmarks/.build-bench/release/tokend-storegen")


def idp_python():
    return env_path("TOKEND_VENV", REPO_DIR / ".venv") / "bin/python"


# ------------------------------------------------------------------ processes

class Processes:
    """Everything a benchmark started, stopped in reverse order (TERM, then KILL after 10 s)."""

    def __init__(self):
        self.procs = []

    def start(self, argv, log_path, **kw):
        out = open(log_path, "ab")
        p = subprocess.Popen(argv, stdout=kw.pop("stdout", out), stderr=out, start_new_session=True, **kw)
        self.procs.append(p)
        return p

    def stop(self, p, timeout=10):
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(5)
        if p in self.procs:
            self.procs.remove(p)

    def stop_all(self):
        for p in reversed(list(self.procs)):
            try:
                self.stop(p)
            except Exception as e:  # keep stopping the others
                log(f"stopping pid {p.pid}: {e}")


def proc_cpu_seconds(pid):
    """utime + stime of a process (all threads), in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def proc_cpu_split(pid):
    """(user, system) CPU seconds of a process (all threads)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) / CLK_TCK, int(fields[12]) / CLK_TCK


def tree_cpu_seconds(pid):
    """CPU seconds of a process and all its live descendants (gunicorn workers)."""
    total = 0.0
    for p in [pid] + descendants(pid):
        try:
            total += proc_cpu_seconds(p)
        except (FileNotFoundError, ProcessLookupError):
            pass
    return total


def descendants(pid):
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry))
            except (FileNotFoundError, ProcessLookupError, ValueError):
                pass
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def proc_status_kib(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def rss_mib(pid):
    return proc_status_kib(pid, "VmRSS") / 1024


def peak_rss_mib(pid):
    return proc_status_kib(pid, "VmHWM") / 1024


def loadavg():
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


def host_info():
    model = ""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {"cpus": os.cpu_count(), "cpu_model": model, "kernel": os.uname().release, "loadavg": loadavg()}


# ------------------------------------------------------------------ varlink

class Varlink:
    """A blocking Varlink connection (`ask_everyone` below pipelines calls on one)."""

    def __init__(self, path, timeout=60):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(str(path))
        self.buf = b""

    def close(self):
        self.sock.close()

    def send(self, method, parameters=None, more=False):
        msg = {"method": method}
        if parameters is not None:
            msg["parameters"] = parameters
        if more:
            msg["more"] = True
        self.sock.sendall(json.dumps(msg, separators=(",", ":")).encode() + b"\0")

    def recv_raw(self):
        while True:
            i = self.buf.find(b"\0")
            if i >= 0:
                raw, self.buf = self.buf[:i], self.buf[i + 1:]
                return raw
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("tokend closed the connection")
            self.buf += chunk

    def call(self, method, parameters=None):
        self.send(method, parameters)
        return json.loads(self.recv_raw())

    def call_streamed(self, method, parameters=None):
        """A `more` call: every reply until one without `continues`; returns (replies, bytes)."""
        self.send(method, parameters, more=True)
        replies, size = [], 0
        for _ in range(10_000_000):
            raw = self.recv_raw()
            size += len(raw) + 1
            reply = json.loads(raw)
            replies.append(reply)
            if not reply.get("continues"):
                break
        return replies, size


def pipelined(sock, count, window, request, ok, limit_s=600):
    """`count` calls on one connection, `window` in flight: `request(i)` is the i-th call's
    (method, parameters), `ok(raw reply)` says whether it succeeded; returns (seconds, errors).

    Non-blocking on both directions (select), so large replies can never deadlock the pipeline."""
    import select
    c = Varlink(sock, timeout=120)
    c.sock.setblocking(False)
    errors, sent, received = 0, 0, 0
    out, buf = b"", b""
    start = time.monotonic()
    deadline = start + limit_s
    while received < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{received}/{count} replies in {limit_s} s")
        while sent < count and sent - received < window and len(out) < 65536:
            method, parameters = request(sent)
            out += json.dumps({"method": method, "parameters": parameters}, separators=(",", ":")).encode() + b"\0"
            sent += 1
        r, w, _ = select.select([c.sock], [c.sock] if out else [], [], 10)
        if w:
            try:
                n = c.sock.send(out)
                out = out[n:]
            except BlockingIOError:
                pass
        if r:
            chunk = c.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("tokend closed the connection")
            buf += chunk
            parts = buf.split(b"\0")
            buf = parts.pop()
            for raw in parts:
                received += 1
                if not ok(raw):
                    errors += 1
                    if errors <= 3:
                        log(f"error reply: {raw[:200]!r}")
    seconds = time.monotonic() - start
    c.close()
    return seconds, errors


def ask_everyone(sock, size, window):
    """ProvideTokenReplacement once for every user `user-0…` of a store of `size` (as tokend-storegen
    names them), `window` calls in flight; returns (seconds, errors)."""
    width = len(str(size - 1))
    return pipelined(sock, size, window,
                     lambda i: ("io.tokend.TokenProvider.ProvideTokenReplacement", {"userIdentifier": f"user-{i:0{width}d}"}),
                     lambda raw: b'"error"' not in raw[:16] and b'"accessToken"' in raw)


def wait_ready(sock_path, proc, timeout):
    """Polls GetInfo every 5 ms until tokend answers; returns the seconds it took."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if proc.poll() is not None:
            raise RuntimeError(f"tokend exited with status {proc.returncode} before it was ready")
        if os.path.exists(sock_path):
            try:
                c = Varlink(sock_path, timeout=5)
                c.call("org.varlink.service.GetInfo")
                c.close()
                return time.monotonic() - start
            except OSError:
                pass
        time.sleep(0.005)
    raise RuntimeError(f"tokend was not ready within {timeout} s")


def write_config(directory, state_dir, key_file, providers, extra_daemon=""):
    cfg = Path(directory) / "tokend.toml"
    cfg.write_text(
        f"""[daemon]
socket = "{Path(directory) / 'tokend.sock'}"
state_directory = "{state_dir}"
key_file = "{key_file}"
max_connections = 4096
max_pipelined_calls = 1024
{extra_daemon}
{providers}
"""
    )
    return cfg


# ------------------------------------------------------------------ numbers

def clean_up(procs, tmp, keep):
    """Stops every process a benchmark started and removes its scratch folder (unless kept)."""
    procs.stop_all()
    if keep:
        log(f"kept {tmp}")
    else:
        shutil.rmtree(tmp, ignore_errors=True)


def percentile(sorted_values, p):
    """Nearest-rank percentile of an already sorted list."""
    if not sorted_values:
        return 0.0
    k = max(0, min(len(sorted_values) - 1, int(-(-p * len(sorted_values) // 100)) - 1))
    return sorted_values[k]


def distribution_ms(values_s):
    v = sorted(x * 1000 for x in values_s)
    return {
        "count": len(v),
        "min_ms": round(v[0], 3) if v else 0,
        "p50_ms": round(percentile(v, 50), 3),
        "p90_ms": round(percentile(v, 90), 3),
        "p99_ms": round(percentile(v, 99), 3),
        "p999_ms": round(percentile(v, 99.9), 3),
        "max_ms": round(v[-1], 3) if v else 0,
    }


def write_result(kind, payload, results_dir=None):
    results_dir = Path(results_dir or os.environ.get("RESULTS_DIR") or BENCH_DIR / "results")
    results_dir.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    path = results_dir / f"{kind}-{stamp}.json"
    payload = {"kind": f"tokend-{kind}-bench", "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
               "host": host_info(), **payload}
    path.write_text(json.dumps(payload, indent=1) + "\n")
    return path


# ------------------------------------------------------------------ the test IdP

IDP_SCRIPT = REPO_DIR / "Tests/idp/idp.py"
PROXY_SCRIPT = REPO_DIR / "Tests/idp/faultproxy.py"
IDP_CLIENT_ID = "tokend-test"
IDP_CLIENT_SECRET = "tokend-test-secret"


def read_ready(p, what, timeout):
    """Waits for the `READY <port>` line a helper prints on stdout."""
    import select
    deadline = time.monotonic() + timeout
    buf = b""
    while time.monotonic() < deadline:
        if p.poll() is not None:
            raise RuntimeError(f"{what} exited with status {p.returncode}")
        r, _, _ = select.select([p.stdout], [], [], 0.5)
        if r:
            chunk = os.read(p.stdout.fileno(), 4096)
            buf += chunk
            for line in buf.decode(errors="replace").splitlines():
                if line.startswith("READY"):
                    return int(line.split()[1])
    raise RuntimeError(f"{what} was not ready within {timeout} s")


def start_idp(procs, directory, workers=4, access_token_lifetime=3600):
    """The real test IdP (django-oauth-toolkit under gunicorn); returns (process, port, state dir)."""
    state = Path(directory) / "idp"
    state.mkdir(parents=True, exist_ok=True)
    p = procs.start([str(idp_python()), str(IDP_SCRIPT), "serve", "--port", "0", "--state-dir", str(state),
                     "--access-token-lifetime", str(access_token_lifetime), "--workers", str(workers)],
                    Path(directory) / "idp.log", stdout=subprocess.PIPE)
    return p, read_ready(p, "the IdP", 120), state


def start_proxy(procs, directory, upstream, mode="pass"):
    """faultproxy.py (pass mode by default): counts token POSTs and the most in flight at once."""
    p = procs.start([sys.executable, str(PROXY_SCRIPT), "--listen", "0", "--upstream", str(upstream), "--mode", mode],
                    Path(directory) / "proxy.log", stdout=subprocess.PIPE)
    return p, read_ready(p, "the proxy", 30)


def proxy_stats(port):
    import urllib.request
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/__stats", timeout=10) as r:
        return json.loads(r.read())


def mint(idp_state, count, lifetime, out_path):
    """`idp.py mint`: `count` fresh token pairs, one token-response JSON per line, into out_path."""
    with open(out_path, "wb") as out:
        subprocess.run([str(idp_python()), str(IDP_SCRIPT), "mint", "--state-dir", str(idp_state), "--count", str(count),
                        "--lifetime", str(lifetime)], check=True, stdout=out, timeout=1800)


def idp_token_posts(idp_state):
    r = subprocess.run([str(idp_python()), str(IDP_SCRIPT), "count-posts", "--state-dir", str(idp_state)],
                       check=True, capture_output=True, text=True, timeout=60)
    return int(r.stdout.strip())


def idp_provider_section(directory, token_endpoint, extra=""):
    secret = Path(directory) / "idp-secret"
    secret.write_text(IDP_CLIENT_SECRET + "\n")
    os.chmod(secret, 0o600)
    return f"""[providers.idp]
kind = "oauth2"
token_endpoint = "{token_endpoint}"
client_id = "{IDP_CLIENT_ID}"
client_secret_file = "{secret}"
client_auth = "client_secret_basic"
{extra}
"""

"""Pieces of the fleet benchmark (bench/fleet.py): its own PostgreSQL server, the grant endpoint
stand-in, tokend nodes sharing the store, and readings of their CPU (stdlib only).

Every wait is bounded; every process started here goes through `Processes`, which the script
stops in `finally`.
"""
import json
import os
import pwd
import random
import re
import select
import signal
import socket
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

from tokendbench import BENCH_DIR, CLK_TCK, Varlink, log, pipelined, proc_cpu_seconds, read_ready

PG_BIN = Path("/usr/lib/postgresql/15/bin")
PG_PASSWORD = "tokend-fleet-bench"
GRANT_ENDPOINT_BIN = BENCH_DIR / ".bin/grant_endpoint"


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ------------------------------------------------------------------ PostgreSQL

class Postgres:
    """Debian's PostgreSQL 15 as the postgres user, on 127.0.0.1, in `directory`; password
    authentication (scram-sha-256) for the superuser, as a fleet's nodes would log in."""

    def __init__(self, procs, directory, settings):
        self.procs, self.directory = procs, Path(directory)
        account = pwd.getpwnam("postgres")
        self.directory.mkdir(parents=True, exist_ok=True)
        os.chown(self.directory, account.pw_uid, account.pw_gid)
        os.chmod(self.directory, 0o700)
        self.data = self.directory / "data"
        self.password_file = self.directory / "pw"
        self.password_file.write_text(PG_PASSWORD + "\n")
        os.chown(self.password_file, account.pw_uid, account.pw_gid)
        self.log_path = self.directory / "postgres.log"
        self.port = free_port()
        self.settings = settings
        self.proc = None
        self._as_postgres([str(PG_BIN / "initdb"), "-D", str(self.data), "-U", "postgres", "--auth=scram-sha-256",
                           f"--pwfile={self.password_file}", "-E", "UTF8", "--no-sync"], timeout=300)

    @staticmethod
    def _as_postgres(argv, timeout):
        r = subprocess.run(["setpriv", "--reuid=postgres", "--regid=postgres", "--clear-groups", "--", *argv],
                           capture_output=True, text=True, timeout=timeout, cwd="/tmp")
        if r.returncode != 0:
            raise RuntimeError(f"{argv[0]} failed: {r.stderr.strip()[-500:]}")
        return r.stdout

    def start(self):
        argv = ["setpriv", "--reuid=postgres", "--regid=postgres", "--clear-groups", "--", str(PG_BIN / "postgres"),
                "-D", str(self.data), "-c", "listen_addresses=127.0.0.1", "-p", str(self.port), "-k", str(self.directory)]
        for name, value in self.settings.items():
            argv += ["-c", f"{name}={value}"]
        self.proc = self.procs.start(argv, self.log_path, cwd="/tmp")
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"postgres exited: {self.log_path.read_text()[-1000:]}")
            try:
                if self.psql("SELECT 1") == "1":
                    return
            except RuntimeError:
                pass
            time.sleep(0.2)
        raise RuntimeError("postgres did not start within 120 s")

    def stop(self):
        if self.proc and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGINT)  # fast shutdown
            try:
                self.proc.wait(120)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        if self.proc in self.procs.procs:
            self.procs.procs.remove(self.proc)

    def url(self, database):
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def psql(self, sql, database="postgres", timeout=600):
        env = dict(os.environ, PGPASSWORD=PG_PASSWORD)
        r = subprocess.run([str(PG_BIN / "psql"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "-d", database,
                            "-v", "ON_ERROR_STOP=1", "-At", "-F", "\t", "-c", sql], capture_output=True, text=True, env=env,
                           timeout=timeout)
        if r.returncode != 0:
            raise RuntimeError(f"psql: {r.stderr.strip()[-500:]}")
        return r.stdout.strip()

    def rows(self, sql, database="postgres"):
        out = self.psql(sql, database)
        return [line.split("\t") for line in out.splitlines() if line]

    def cpu_seconds(self):
        """CPU of the server: the postmaster, its live processes, and the ones it has reaped (its
        children's time in /proc/PID/stat), so backends and autovacuum workers that came and went
        are counted."""
        pid = self.proc.pid
        # setpriv execs postgres: the pid is the postmaster's.
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total = sum(int(fields[i]) for i in (11, 12, 13, 14)) / CLK_TCK
        for child in children(pid):
            try:
                total += proc_cpu_seconds(child)
            except (FileNotFoundError, ProcessLookupError):
                pass
        return total

    def log_lines_since(self, offset):
        with open(self.log_path, "rb") as f:
            f.seek(offset)
            return f.read().decode(errors="replace").splitlines()

    def log_size(self):
        return self.log_path.stat().st_size


def children(pid):
    out = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                out += [int(c) for c in f.read().split()]
    except FileNotFoundError:
        pass
    return out


# ------------------------------------------------------------------ the grant endpoint

class GrantEndpoint:
    """bench/floor/grant_endpoint.c: answers refresh grants, counts them per credential."""

    def __init__(self, procs, directory, lifetime, jwt_bytes=0, token_bytes=40):
        argv = [str(GRANT_ENDPOINT_BIN), "--port", "0", "--lifetime", str(lifetime)]
        argv += ["--jwt-bytes", str(jwt_bytes)] if jwt_bytes else ["--token-bytes", str(token_bytes)]
        self.proc = procs.start(argv, Path(directory) / "grant-endpoint.log", stdout=subprocess.PIPE)
        self.port = read_ready(self.proc, "the grant endpoint", 30)

    def _request(self, method, path):
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", method=method, data=b"" if method == "POST" else None)
        with urllib.request.urlopen(request, timeout=30) as r:
            return json.loads(r.read())

    def stats(self):
        return self._request("GET", "/__stats")

    def new_wave(self):
        self._request("POST", "/__wave")

    def granted_more_than_once(self):
        return self._request("GET", "/__more")

    @property
    def token_endpoint(self):
        return f"http://127.0.0.1:{self.port}/token"


# ------------------------------------------------------------------ tokend nodes

def node_config(directory, name, key_file, pg, database, endpoint, lease, reconcile, grants_in_flight, refresh_at):
    directory = Path(directory)
    state = directory / "state"
    state.mkdir(parents=True, exist_ok=True)
    os.chmod(state, 0o700)
    password = directory / "pg-password"
    password.write_text(PG_PASSWORD + "\n")
    os.chmod(password, 0o600)
    config = directory / "tokend.toml"
    config.write_text(f"""[daemon]
socket = "{directory / 'tokend.sock'}"
admin_socket = ""
state_directory = "{state}"
key_file = "{key_file}"
node_name = "{name}"
max_connections = 4096
max_pipelined_calls = 1024
max_grants_in_flight = {grants_in_flight}

[store]
kind = "postgresql"
url = "{pg.url(database)}"
password_file = "{password}"
lease = "{lease}"
reconcile_interval = "{reconcile}"

[providers.fleet]
kind = "oauth2"
token_endpoint = "{endpoint}"
client_id = "fleet"
client_auth = "none"
rate_limit = 100000
rate_burst = 10000
refresh_at = {refresh_at}
""")
    return config


class Node:
    def __init__(self, name, directory, config, tokend):
        self.name, self.directory, self.config, self.tokend = name, Path(directory), config, tokend
        self.sock = self.directory / "tokend.sock"
        self.log_path = self.directory / "tokend.log"
        self.proc = None

    def start(self, procs):
        if self.sock.exists():
            self.sock.unlink()
        self.proc = procs.start([str(self.tokend), "--config", str(self.config)], self.log_path)
        self.started = time.monotonic()
        return self.proc

    def refreshed(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().count(b"credential refreshed")
        except FileNotFoundError:
            return 0

    def resent_grants(self):
        """The credentials whose grant this node sent again after another node left it in flight."""
        users = set()
        try:
            with open(self.log_path, errors="replace") as f:
                for line in f:
                    if "sending again a grant" in line:
                        match = re.search(r"user_identifier=(\S+)", line)
                        if match:
                            users.add(match.group(1))
        except FileNotFoundError:
            pass
        return users

    def log_summary(self):
        """Lines by level, and the most frequent warning and error messages (without their
        time and metadata)."""
        levels, messages = {}, {}
        try:
            with open(self.log_path, errors="replace") as f:
                for line in f:
                    parts = line.split(" ", 2)
                    if len(parts) < 3:
                        continue
                    level = parts[1]
                    levels[level] = levels.get(level, 0) + 1
                    if level in ("warning", "error", "critical"):
                        text = level + ": " + line.rsplit("] ", 1)[-1].strip()
                        messages[text] = messages.get(text, 0) + 1
        except FileNotFoundError:
            pass
        top = sorted(messages.items(), key=lambda item: -item[1])[:5]
        return {"levels": levels, "top_problems": [{"message": m, "count": c} for m, c in top]}

    def log_count(self, needle):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().count(needle.encode())
        except FileNotFoundError:
            return 0


# ------------------------------------------------------------------ clients

def token_expiry(token):
    """The expiry a token carries itself: `at.<user>.<n>.<exp>.…` or a JWT's `exp` claim."""
    if token.startswith("at."):
        return int(token.split(".")[3])
    import base64
    payload = token.split(".")[1]
    payload += "=" * (-len(payload) % 4)
    return int(json.loads(base64.urlsafe_b64decode(payload))["exp"])


class WaveClient(threading.Thread):
    """Asks random credentials on random nodes at `rate` per second during a wave; counts
    replies, errors, and expired tokens served: a reply whose token's own expiry (the endpoint
    and tokend-storegen --traceable write it into every token) is not after the moment the
    reply arrived."""

    def __init__(self, nodes, users, rate, stop):
        super().__init__(daemon=True)
        self.nodes, self.users, self.rate, self.stop = nodes, users, rate, stop
        self.replies = self.errors = self.expired = self.unreachable = 0
        self.first_error = None
        self.latencies = []

    def run(self):
        connections = {}
        interval = 1.0 / self.rate
        next_at = time.monotonic()
        while not self.stop.is_set() and self.replies < 10_000_000:
            node = random.choice(self.nodes)
            if node.proc is None or node.proc.poll() is not None:
                connections.pop(node.name, None)
                continue
            user = random.choice(self.users)
            try:
                c = connections.get(node.name) or Varlink(node.sock, timeout=60)
                connections[node.name] = c
                t = time.monotonic()
                r = c.call("io.tokend.TokenProvider.ProvideTokenReplacement", {"userIdentifier": user})
                self.latencies.append(time.monotonic() - t)
            except OSError:
                connections.pop(node.name, None)
                self.unreachable += 1
                continue
            now = time.time()
            self.replies += 1
            if "error" in r:
                self.errors += 1
                self.first_error = self.first_error or r
            else:
                credentials = r["parameters"]["credentials"]
                if credentials["expiresAt"] <= now or token_expiry(credentials["accessToken"]) <= now:
                    self.expired += 1
            next_at += interval
            delay = next_at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        for c in connections.values():
            c.close()


def propagation(sock_a, sock_c, users, timeout=10):
    """For each user: a Watch on node C, then a forced refresh on node A (`rejectedToken` = the
    current token); the time from A's answer (and from the call) until C's watcher gets the new
    token. Returns ([after A answered], [after the call], misses)."""
    after_answer, after_call, misses = [], [], 0
    a = Varlink(sock_a, timeout=60)
    for user in users:
        w = Varlink(sock_c, timeout=timeout)
        w.send("io.tokend.TokenProvider.Watch", {"userIdentifier": user}, more=True)
        json.loads(w.recv_raw())  # the token now
        current = a.call("io.tokend.TokenProvider.ProvideTokenReplacement", {"userIdentifier": user})
        token = current["parameters"]["credentials"]["accessToken"]
        t0 = time.monotonic()
        r = a.call("io.tokend.TokenProvider.ProvideTokenReplacement", {"userIdentifier": user, "rejectedToken": token})
        t1 = time.monotonic()
        if "error" in r:
            misses += 1
            w.close()
            continue
        new = r["parameters"]["credentials"]["accessToken"]
        deadline = t0 + timeout
        seen = False
        while time.monotonic() < deadline:
            w.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                reply = json.loads(w.recv_raw())
            except (OSError, ConnectionError):
                break
            if reply.get("parameters", {}).get("credentials", {}).get("accessToken") == new:
                t2 = time.monotonic()
                after_answer.append(t2 - t1)
                after_call.append(t2 - t0)
                seen = True
                break
        if not seen:
            misses += 1
        w.close()
    a.close()
    return after_answer, after_call, misses


def add_credentials(sock, count, connections=4, prefix="add-"):
    """AddCredential `count` times, pipelined on `connections` connections (64 calls in flight
    on each); returns (seconds, errors)."""
    exp = int(time.time()) + 86400
    results = [(0.0, 0)] * connections

    def add(index):
        def request(i):
            user = f"{prefix}{i * connections + index:07d}"
            return ("io.tokend.TokenProvider.AddCredential",
                    {"userIdentifier": user, "provider": "fleet", "accessToken": f"at.{user}.0.{exp}.",
                     "refreshToken": f"rt.{user}.0", "expiresIn": 86400, "readers": ["uid:0"]})
        share = len(range(index, count, connections))
        results[index] = pipelined(sock, share, 64, request, lambda raw: b'"error"' not in raw[:16])

    start = time.monotonic()
    threads = [threading.Thread(target=add, args=(i,), daemon=True) for i in range(connections)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(700)
    return time.monotonic() - start, sum(errors for _, errors in results)

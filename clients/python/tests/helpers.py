"""The real things the tests run: the test IdP (django-oauth-toolkit, Tests/idp/idp.py), the tokend
binary from $TOKEND_BIN_DIR, and a small resource server that checks bearer tokens at the IdP.

Every server binds 127.0.0.1 (or a Unix socket in a scratch directory), every wait is bounded,
and every process is stopped by its fixture. Children also get SIGKILL when the test process
dies (PR_SET_PDEATHSIG), so an interrupted run leaves nothing behind.
"""

from __future__ import annotations

import base64
import ctypes
import http.server
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[3]
IDP_SCRIPT = REPO / "Tests" / "idp" / "idp.py"
CLIENT_ID = "tokend-test"
CLIENT_SECRET = "tokend-test-secret"
PROVIDER = "idp"
#: A provider with ``dpop = true``: tokend makes a DPoP key for each credential added for it. Its
#: token endpoint (the discard port) is never contacted: its credentials have no refresh token.
DPOP_PROVIDER = "dpop"
#: The IdP once more, with ``narrowed_tokens = true``: tokend may ask it for tokens narrowed to a
#: scope or a resource. Only daemons started with ``narrowed_provider(idp)`` have it.
NARROWED_PROVIDER = "narrowed"


def bin_dir() -> Path:
    return Path(os.environ.get("TOKEND_BIN_DIR") or REPO / ".build" / "debug")


def _die_with_parent() -> None:
    """preexec_fn: SIGKILL this child when the test process dies (Linux)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:
        pass


def scratch_directory() -> Path:
    """A short path under /tmp (Unix socket paths are limited to 107 bytes)."""
    path = Path(tempfile.mkdtemp(prefix="tokend-py-", dir="/tmp"))
    path.chmod(0o755)
    return path


def remove_scratch(path: Path) -> None:
    if not os.environ.get("TOKEND_KEEP_SCRATCH"):
        shutil.rmtree(path, ignore_errors=True)


def stop_process(process: subprocess.Popen, group: bool = False, timeout: float = 15.0) -> None:
    """SIGTERM, wait at most ``timeout``, then SIGKILL (the whole process group when ``group``)."""
    if process.poll() is None:
        try:
            if group:
                os.killpg(process.pid, signal.SIGTERM)
            else:
                process.send_signal(signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            pass
    if group:
        try:
            os.killpg(process.pid, signal.SIGKILL)  # whatever is left of the group (gunicorn workers)
        except (ProcessLookupError, PermissionError):
            pass
    if process.poll() is None:
        process.kill()
        process.wait(10)


class IdentityProvider:
    """``idp.py serve`` on a free 127.0.0.1 port, with its state in ``directory``."""

    def __init__(self, directory: Path, access_token_lifetime: int = 3600) -> None:
        self.state_dir = directory / "idp"
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = directory / "idp.log"
        self.access_token_lifetime = access_token_lifetime
        self.process: subprocess.Popen | None = None
        self.port = 0

    @property
    def base_url(self) -> str:
        return "http://127.0.0.1:%d" % self.port

    def start(self, timeout: float = 90.0) -> None:
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, str(IDP_SCRIPT), "serve", "--port", "0", "--state-dir", str(self.state_dir),
                 "--access-token-lifetime", str(self.access_token_lifetime)],
                stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL,
                start_new_session=True, preexec_fn=_die_with_parent,
            )
        deadline = time.monotonic() + timeout
        output = b""
        stdout = self.process.stdout
        assert stdout is not None
        while b"\n" not in output:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self.process.poll() is not None:
                self.stop()
                raise RuntimeError("the test IdP did not become ready within %gs: %s" % (timeout, self.log()))
            readable, _, _ = select.select([stdout], [], [], min(remaining, 1.0))
            if readable:
                chunk = os.read(stdout.fileno(), 4096)
                if not chunk:
                    continue
                output += chunk
        line = output.decode().strip().splitlines()[0]
        if not line.startswith("READY "):
            self.stop()
            raise RuntimeError("unexpected output of idp.py serve: %r" % line)
        self.port = int(line.split()[1])

    def stop(self) -> None:
        if self.process is not None:
            stop_process(self.process, group=True)
            if self.process.stdout is not None:
                self.process.stdout.close()

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def _tool(self, *arguments: str, timeout: float = 60.0) -> str:
        result = subprocess.run(
            [sys.executable, str(IDP_SCRIPT), *list(arguments), "--state-dir", str(self.state_dir)],
            capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
        )
        if result.returncode != 0:
            raise RuntimeError("idp.py %s failed: %s" % (arguments[0], result.stderr[-2000:]))
        return result.stdout

    def mint(
        self, count: int = 1, lifetime: int | None = None, prefix: str | None = None, scope: str | None = None
    ) -> list[dict]:
        """Fresh token pairs (token endpoint responses) of alice for the confidential client, with
        ``scope`` (default: the IdP's, ``read``)."""
        arguments = ["mint", "--count", str(count), "--client", CLIENT_ID]
        if lifetime is not None:
            arguments += ["--lifetime", str(lifetime)]
        if prefix is not None:
            arguments += ["--prefix", prefix]
        if scope is not None:
            arguments += ["--scope", scope]
        return [json.loads(line) for line in self._tool(*arguments).splitlines() if line.strip()]

    def count_posts(self, path: str = "/o/token/") -> int:
        """POSTs the IdP logged for ``path``: with /o/token/, the grants tokend made."""
        return int(self._tool("count-posts", "--path", path).strip())

    def revoke_refresh_token(self, refresh_token: str) -> None:
        self._tool("revoke", "--refresh-token", refresh_token)

    def _post(self, path: str, fields: dict[str, str]) -> Any:
        credentials = base64.b64encode(("%s:%s" % (CLIENT_ID, CLIENT_SECRET)).encode()).decode()
        request = urllib.request.Request(
            self.base_url + path,
            data=urllib.parse.urlencode(fields).encode(),
            headers={"Authorization": "Basic " + credentials, "Content-Type": "application/x-www-form-urlencoded"},
            method="POST",
        )
        return urllib.request.urlopen(request, timeout=10)

    def introspect(self, token: str) -> dict:
        """RFC 7662 introspection, authenticated as the confidential client."""
        with self._post("/o/introspect/", {"token": token}) as response:
            return json.loads(response.read())

    def revoke_access_token(self, token: str) -> None:
        """RFC 7009 revocation of an access token: the IdP forgets it at once."""
        with self._post("/o/revoke_token/", {"token": token, "token_type_hint": "access_token"}) as response:
            if response.status != 200:
                raise RuntimeError("revocation answered %d" % response.status)


class Daemon:
    """The real tokend, on a configuration in ``directory`` whose provider ``idp`` is ``idp``, and
    whose provider ``dpop`` (``DPOP_PROVIDER``) binds tokens to DPoP keys; ``extra_providers``
    (TOML sections) come after them."""

    def __init__(self, directory: Path, idp: IdentityProvider, extra_daemon: str = "", extra_providers: str = "") -> None:
        self.directory = directory
        self.socket_path = str(directory / "tokend.sock")
        self.config_path = directory / "tokend.toml"
        self.log_path = directory / "tokend.log"
        self.process: subprocess.Popen | None = None
        (directory / "idp-secret").write_text(CLIENT_SECRET + "\n")
        (directory / "idp-secret").chmod(0o600)
        self.config_path.write_text(
            "[daemon]\n"
            'socket = "tokend.sock"\n'
            'state_directory = "state"\n'
            'call_timeout = "5s"\n'
            'log_level = "debug"\n'
            + extra_daemon
            + "\n"
            + idp_provider(PROVIDER, idp)
            + "\n[providers.%s]\n" % DPOP_PROVIDER
            + 'kind = "oauth2"\n'
            'token_endpoint = "http://127.0.0.1:9/token"\n'
            'client_id = "tokend-dpop-test"\n'
            'client_auth = "none"\n'
            "dpop = true\n"
            "dpop_bind_on_refresh = true\n"
            + ("\n" + extra_providers if extra_providers else "")
        )

    def start(self, timeout: float = 20.0) -> None:
        binary = bin_dir() / "tokend"
        if not binary.exists():
            raise RuntimeError("no tokend binary at %s (set TOKEND_BIN_DIR)" % binary)
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [str(binary), "--config", str(self.config_path)],
                stdout=log, stderr=log, stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError("tokend exited with %s: %s" % (self.process.returncode, self.log()))
            if can_connect(self.socket_path):
                return
            time.sleep(0.05)
        self.stop()
        raise RuntimeError("tokend did not listen within %gs: %s" % (timeout, self.log()))

    def stop(self) -> int | None:
        if self.process is None:
            return None
        stop_process(self.process, timeout=20.0)
        return self.process.returncode

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-4000:]
        except OSError:
            return ""


def idp_provider(name: str, idp: IdentityProvider, extra: str = "") -> str:
    """A provider section ``name`` for the test IdP, with ``extra`` lines."""
    return (
        "[providers.%s]\n" % name
        + 'kind = "oauth2"\n'
        'token_endpoint = "%s/o/token/"\n' % idp.base_url
        + 'revocation_endpoint = "%s/o/revoke_token/"\n' % idp.base_url
        + 'client_id = "%s"\n' % CLIENT_ID
        + 'client_secret_file = "idp-secret"\n'
        'client_auth = "client_secret_basic"\n' + extra
    )


def narrowed_provider(idp: IdentityProvider) -> str:
    """The configuration of ``NARROWED_PROVIDER``: the provider ``idp`` again, with
    ``narrowed_tokens = true`` (for ``Daemon(..., extra_providers=...)``)."""
    return idp_provider(NARROWED_PROVIDER, idp, "narrowed_tokens = true\n")


def cli(*arguments: str, socket: str) -> subprocess.CompletedProcess:
    """``python -m tokend ARGUMENTS`` with ``$TOKEND_SOCKET`` set to ``socket``."""
    environment = dict(os.environ, TOKEND_SOCKET=socket)
    return subprocess.run(
        [sys.executable, "-m", "tokend", *list(arguments)],
        capture_output=True, text=True, timeout=30, env=environment, stdin=subprocess.DEVNULL,
    )


def can_connect(path: str) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(1)
        try:
            probe.connect(path)
        except OSError:
            return False
        return True


class SilentServer:
    """A Unix socket server that is not tokend: it accepts, reads what it is sent, and never
    answers (or answers ``reply`` once, when given). For the client's timeout and framing checks."""

    def __init__(self, path: str, reply: bytes | None = None) -> None:
        self.path = path
        self.reply = reply
        self.received = b""
        self.connections = 0
        self._stop = threading.Event()
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(path)
        self._listener.listen(8)
        self._listener.settimeout(0.1)
        self._peers: list[socket.socket] = []
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                peer, _ = self._listener.accept()
                peer.setblocking(False)
                self._peers.append(peer)
                self.connections += 1
            except TimeoutError:
                pass
            except OSError:
                return
            for peer in list(self._peers):
                try:
                    data = peer.recv(65536)
                except BlockingIOError:
                    continue
                except OSError:
                    self._peers.remove(peer)
                    continue
                if not data:
                    self._peers.remove(peer)
                    peer.close()
                    continue
                self.received += data
                if self.reply is not None and data.endswith(b"\0"):
                    peer.sendall(self.reply)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._listener.close()
        for peer in self._peers:
            peer.close()
        try:
            os.unlink(self.path)
        except OSError:
            pass


class ResourceServer:
    """An HTTP API on 127.0.0.1 that accepts a bearer token only while the IdP says it is active
    (RFC 7662 introspection with the confidential client's credentials), as a real resource
    server would. ``reject_all`` makes it answer 401 to everything; ``redirect_to`` makes
    ``/redirect`` answer 302 to that URL. It records every request (its headers by lowercase name)."""

    def __init__(self, idp: IdentityProvider) -> None:
        self.idp = idp
        self.reject_all = False
        #: Where GET /redirect sends the client (302), when set.
        self.redirect_to: str | None = None
        self.seen: list[dict] = []
        self._lock = threading.Lock()
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:  # keep tokens out of logs
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                header = self.headers.get("Authorization") or ""
                scheme, _, token = header.partition(" ")
                with server._lock:
                    server.seen.append(
                        {"method": self.command, "path": self.path, "token": token, "body": body,
                         "headers": {name.lower(): value for name, value in self.headers.items()}}
                    )
                if self.path == "/redirect" and server.redirect_to:
                    self.send_response(302)
                    self.send_header("Location", server.redirect_to)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                active = False
                if scheme.lower() == "bearer" and token and not server.reject_all:
                    active = bool(server.idp.introspect(token).get("active"))
                if active:
                    payload = json.dumps({"ok": True, "body": body.decode("utf-8", "replace")}).encode()
                    self.send_response(200)
                else:
                    payload = b'{"error": "invalid_token"}'
                    self.send_response(401)
                    self.send_header("WWW-Authenticate", 'Bearer error="invalid_token"')
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = _handle
            do_POST = _handle
            do_PUT = _handle

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = "http://127.0.0.1:%d/api/me" % self.httpd.server_address[1]
        self.redirect_url = "http://127.0.0.1:%d/redirect" % self.httpd.server_address[1]
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
        self._thread.start()

    @property
    def count(self) -> int:
        with self._lock:
            return len(self.seen)

    def tokens(self) -> list[str]:
        with self._lock:
            return [entry["token"] for entry in self.seen]

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(5)


def base64url_decode(text: str) -> bytes:
    """Base64url without padding (JWS, RFC 7515 §2), strictly: padding or other characters fail."""
    assert text and "=" not in text and set(text) <= set(
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    ), text
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def decode_jwt(token: str) -> Any:
    """The header and claims of a compact JWS, and its signing input and signature (not verified)."""
    parts = token.split(".")
    assert len(parts) == 3, "a compact JWS has three parts, not %d" % len(parts)
    header = json.loads(base64url_decode(parts[0]))
    claims = json.loads(base64url_decode(parts[1]))
    assert isinstance(header, dict) and isinstance(claims, dict)
    return header, claims, (parts[0] + "." + parts[1]).encode("ascii"), base64url_decode(parts[2])


def refused_twice(api: ResourceServer, idp: IdentityProvider, send: Callable[[], Any]) -> Any:
    """``send()``s a request to an ``api`` that refuses every token: the auth must get one new
    token (one grant at the IdP) and retry once, then hand back the second 401, returned here."""
    api.reject_all = True
    grants = idp.count_posts()
    response = send()
    assert response.status_code == 401
    assert api.count == 2
    assert idp.count_posts() == grants + 1
    return response


class FullAcceptQueue:
    """A Unix socket listener that accepts nothing, its accept queue filled by connections of its
    own: a connect to it is refused at once with EAGAIN until ``answer_once`` empties the queue and
    answers the first call that comes with ``reply``."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(path)
        self.listener.listen(0)
        self.fillers: list[socket.socket] = []
        for _ in range(64):
            filler = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            filler.setblocking(False)
            try:
                filler.connect(path)
            except BlockingIOError:
                filler.close()
                return
            self.fillers.append(filler)
        raise AssertionError("the accept queue never filled")

    def answer_once(self, reply: bytes) -> bool:
        """Closes the fillers, then accepts until a connection sends a call, and answers it.
        False when no call came within 10 s."""
        for filler in self.fillers:
            filler.close()
        self.fillers = []
        self.listener.settimeout(10)
        try:
            while True:
                peer, _ = self.listener.accept()  # the fillers' connections first (closed)
                with peer:
                    peer.settimeout(10)
                    data = b""
                    while not data.endswith(b"\0"):
                        chunk = peer.recv(4096)
                        if not chunk:
                            break
                        data += chunk
                    if data.endswith(b"\0"):
                        peer.sendall(reply)
                        return True
        except TimeoutError:
            return False

    def close(self) -> None:
        for filler in self.fillers:
            filler.close()
        self.listener.close()

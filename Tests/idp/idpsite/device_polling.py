"""RFC 8628 polling rules that django-oauth-toolkit 3.4 leaves out, so tests can exercise a
client's handling of them. DOT's token view has a TODO for slow_down and never expires a
pending device code; this middleware (active with --device-flow) adds:

- IDP_DEVICE_CODE_LIFETIME (seconds, optional): the device authorization response's
  expires_in, and the grant's real expiry;
- a poll of a pending code past its expiry marks it expired, so DOT answers expired_token;
- a poll sooner than the code's current interval after the previous poll (or after the
  authorization) answers 400 slow_down and adds 5 s to that code's interval (RFC 8628 §3.5),
  and is counted as "too_early";
- IDP_DEVICE_SLOW_DOWN_FIRST: the first poll of every code answers slow_down (+5 s) anyway.

Per-code state lives in STATE_DIR/device-polls/<sha256>.json under an flock, because gunicorn
runs several processes; `idp.py device-polls` sums it up.
"""
import datetime
import fcntl
import hashlib
import json
import os
import time

from django.conf import settings
from django.http import JsonResponse

SLACK = 0.25  # seconds of arrival jitter forgiven


def _state_path(device_code):
    directory = settings.STATE_DIR / "device-polls"
    directory.mkdir(exist_ok=True)
    return directory / (hashlib.sha256(device_code.encode()).hexdigest() + ".json")


def _update(device_code, change):
    """Runs change(state) -> result on the code's state under an exclusive lock."""
    path = _state_path(device_code)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        raw = os.read(fd, 65536)
        state = json.loads(raw) if raw else {}
        result = change(state)
        os.lseek(fd, 0, os.SEEK_SET)
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps(state).encode())
        return result
    finally:
        os.close(fd)


def summary(state_dir):
    totals = {"codes": 0, "polls": 0, "slow_down": 0, "too_early": 0}
    directory = state_dir / "device-polls"
    if directory.exists():
        for path in directory.glob("*.json"):
            state = json.loads(path.read_text() or "{}")
            totals["codes"] += 1
            for key in ("polls", "slow_down", "too_early"):
                totals[key] += state.get(key, 0)
    return totals


class DevicePollingMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response
        self.enabled = os.environ.get("IDP_DEVICE_FLOW") == "1"
        self.lifetime = int(os.environ.get("IDP_DEVICE_CODE_LIFETIME") or 0)
        self.slow_down_first = os.environ.get("IDP_DEVICE_SLOW_DOWN_FIRST") == "1"
        self.interval = int(settings.OAUTH2_PROVIDER.get("DEVICE_FLOW_INTERVAL", 5))

    def __call__(self, request):
        if not self.enabled or request.method != "POST":
            return self.get_response(request)
        if request.path == "/o/device-authorization/":
            return self.authorized(request, self.get_response(request))
        if request.path == "/o/token/" and request.POST.get("grant_type") == "urn:ietf:params:oauth:grant-type:device_code":
            early = self.poll(request.POST.get("device_code", ""))
            if early is not None:
                return early
        return self.get_response(request)

    def authorized(self, request, response):
        if response.status_code != 200:
            return response
        data = json.loads(response.content)
        if self.lifetime:
            from oauth2_provider.models import DeviceGrant
            data["expires_in"] = self.lifetime
            DeviceGrant.objects.filter(device_code=data["device_code"]).update(
                expires=datetime.datetime.now(tz=datetime.timezone.utc) + datetime.timedelta(seconds=self.lifetime))

        def start(state):
            state.update(last=time.time(), interval=self.interval, polls=0, slow_down=0, too_early=0)
        _update(data["device_code"], start)
        return JsonResponse(data, status=200)

    def poll(self, device_code):
        from oauth2_provider.models import DeviceGrant
        grant = DeviceGrant.objects.filter(device_code=device_code).first()
        if grant is None:
            return None
        if grant.status == DeviceGrant.AUTHORIZATION_PENDING and grant.is_expired():
            return None  # DOT now answers expired_token

        def check(state):
            now = time.time()
            state["polls"] = state.get("polls", 0) + 1
            interval = state.get("interval", self.interval)
            too_early = now - state.get("last", 0) + SLACK < interval
            first = state["polls"] == 1 and self.slow_down_first
            state["last"] = now
            if too_early:
                state["too_early"] = state.get("too_early", 0) + 1
            if too_early or first:
                state["slow_down"] = state.get("slow_down", 0) + 1
                state["interval"] = interval + 5
                return True
            return False
        if _update(device_code, check):
            return JsonResponse({"error": "slow_down", "error_description": "polling too fast"}, status=400)
        return None

"""Small pieces the settings refer to by dotted path."""
import os
import time

from django.conf import settings
from django.contrib.auth.hashers import PBKDF2PasswordHasher
from django.http import HttpResponse


class FastPBKDF2PasswordHasher(PBKDF2PasswordHasher):
    """Same algorithm and hash format as Django's, with test-sized cost."""
    iterations = 1000


class AccessLogMiddleware:
    """Appends `METHOD PATH STATUS MILLISECONDS` to STATE_DIR/access.log.

    One os.write on an O_APPEND descriptor per line, so lines from several
    gunicorn processes and threads never interleave.
    """

    def __init__(self, get_response):
        self.get_response = get_response
        self.fd = os.open(settings.ACCESS_LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def __call__(self, request):
        start = time.monotonic()
        response = self.get_response(request)
        ms = (time.monotonic() - start) * 1000
        os.write(self.fd, f"{request.method} {request.path} {response.status_code} {ms:.1f}\n".encode())
        return response


def healthz(request):
    return HttpResponse("ok\n", content_type="text/plain")


class AutoLoginMiddleware:
    """Treat every browser-side request (/o/authorize/, /o/device...) as alice,
    so authorization-code and device flows run headless: the clients skip the
    consent page, so /o/authorize/ redirects straight to redirect_uri?code=..."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if not request.user.is_authenticated and request.path.startswith(("/o/authorize/", "/o/device")):
            from django.contrib.auth import get_user_model
            request.user = get_user_model().objects.get(username="alice")
        return self.get_response(request)

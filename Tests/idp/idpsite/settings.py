"""Settings for the tokend test IdP. Every knob comes from IDP_* environment
variables, which `idp.py` sets from its command line (see README.md)."""
import os
from pathlib import Path


def _env_bool(name, default=False):
    return os.environ.get(name, "1" if default else "0").lower() in ("1", "true", "yes")


STATE_DIR = Path(os.environ["IDP_STATE_DIR"]).resolve()
ACCESS_LOG = STATE_DIR / "access.log"

SECRET_KEY = "tokend-test-idp-not-a-secret"
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "[::1]"]
USE_TZ = True
TIME_ZONE = "UTC"
ROOT_URLCONF = "idpsite.urls"
WSGI_APPLICATION = "idpsite.wsgi.application"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "oauth2_provider",
]
MIDDLEWARE = [
    # Outermost, so the log line is written before gunicorn sends the
    # response: a test that got its answer can count the POST at once.
    "idpsite.support.AccessLogMiddleware",
    # RFC 8628 expiry and slow_down, which DOT leaves out (--device-flow only).
    "idpsite.device_polling.DevicePollingMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "idpsite.support.AutoLoginMiddleware",  # no login page: alice is always "logged in"
]
TEMPLATES = [{
    "BACKEND": "django.template.backends.django.DjangoTemplates",
    "APP_DIRS": True,
    "OPTIONS": {"context_processors": ["django.contrib.auth.context_processors.auth"]},
}]

DATABASES = {
    "default": {
        "ENGINE": "idpsite.sqlite_flock",  # stock sqlite3 + flock-serialised writes (see there)
        "NAME": STATE_DIR / "idp.sqlite3",
        # Keep each thread's connection open: reconnecting per request costs a
        # WAL checkpoint + fsync (~40 ms per grant).
        "CONN_MAX_AGE": None,
        "OPTIONS": {
            # Busy timeout (s): gunicorn workers and `idp.py mint` share the file.
            "timeout": 30,
            # WAL lets readers run beside the single writer; synchronous=NORMAL
            # drops the fsync per commit (durability is irrelevant in tests).
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            # BEGIN IMMEDIATE takes the write lock up front, so two writers wait
            # on the busy timeout instead of failing with "database is locked"
            # when both try to upgrade a read transaction.
            "transaction_mode": "IMMEDIATE",
        },
    }
}

# Stock PBKDF2 runs 1,000,000 iterations (~250 ms/grant, since DOT checks the
# hashed client secret on every token request). The subclass listed first
# hashes with 1000 (~0.3 ms); the count is stored in each hash, so checks are fast.
PASSWORD_HASHERS = [
    "idpsite.support.FastPBKDF2PasswordHasher",
    "django.contrib.auth.hashers.PBKDF2PasswordHasher",
]

_oidc = _env_bool("IDP_OIDC")
OAUTH2_PROVIDER = {
    "ACCESS_TOKEN_EXPIRE_SECONDS": int(os.environ.get("IDP_ACCESS_TOKEN_LIFETIME", "3600")),
    "ROTATE_REFRESH_TOKEN": _env_bool("IDP_ROTATE", True),
    # Seconds during which the immediately preceding (rotated) refresh token
    # is still honoured and returns the same new pair. 0 = reuse -> invalid_grant.
    "REFRESH_TOKEN_GRACE_PERIOD_SECONDS": int(os.environ.get("IDP_REFRESH_GRACE", "0")),
    # Reuse of a rotated refresh token revokes the whole token family.
    "REFRESH_TOKEN_REUSE_PROTECTION": _env_bool("IDP_REUSE_PROTECTION"),
    "SCOPES": {
        "read": "Reading scope",
        "write": "Writing scope",
        "offline_access": "Refresh tokens",
        "openid": "OpenID Connect",
    },
    "DEFAULT_SCOPES": ["read"],
    # RFC 8252: http://127.0.0.1:<any port>/callback matches the registered URI.
    "ALLOW_LOCALHOST_LOOPBACK": True,
    "PKCE_REQUIRED": True,
    "OIDC_ENABLED": _oidc,
    "OIDC_RSA_PRIVATE_KEY": (STATE_DIR / "oidc-rsa.pem").read_text() if _oidc else "",
}
if os.environ.get("IDP_BASE_URL") and _env_bool("IDP_DEVICE_FLOW"):
    # RFC 8628: oauthlib refuses device authorization without this URI.
    OAUTH2_PROVIDER["OAUTH_DEVICE_VERIFICATION_URI"] = os.environ["IDP_BASE_URL"] + "/o/device/"
    OAUTH2_PROVIDER["DEVICE_FLOW_INTERVAL"] = int(os.environ.get("IDP_DEVICE_INTERVAL") or 5)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},  # -> gunicorn.log
    "root": {"handlers": ["console"], "level": "WARNING"},
}

"""Fixtures: one test IdP and one tokend for the session, a fresh user (credential) per test.

Each test works on its own user identifier and removes it afterwards, so grants counted at the
IdP belong to the test that counts them (nothing else refreshes meanwhile: the session's tokens
live an hour, and short-lived ones belong to the test that made them).
"""

from __future__ import annotations

import itertools
import re
import secrets
import signal
from collections.abc import Iterator

import pytest

pytest.register_assert_rewrite("helpers")  # before the import: helpers' asserts explain themselves

from helpers import (  # noqa: E402
    DPOP_PROVIDER,
    PROVIDER,
    Daemon,
    IdentityProvider,
    ResourceServer,
    remove_scratch,
    scratch_directory,
)

import tokend  # noqa: E402


def pytest_configure(config: pytest.Config) -> None:
    # `timeout` (test.sh) sends SIGTERM: turn it into KeyboardInterrupt so that fixtures still
    # stop the daemon and the IdP.
    def interrupt(signum, frame):
        raise KeyboardInterrupt("SIGTERM")

    signal.signal(signal.SIGTERM, interrupt)


@pytest.fixture(scope="session")
def scratch() -> Iterator:
    path = scratch_directory()
    yield path
    remove_scratch(path)


@pytest.fixture(scope="session")
def idp(scratch) -> Iterator[IdentityProvider]:
    server = IdentityProvider(scratch, access_token_lifetime=3600)
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def daemon(scratch, idp) -> Iterator[Daemon]:
    directory = scratch / "daemon"
    directory.mkdir()
    process = Daemon(directory, idp)
    process.start()
    yield process
    status = process.stop()
    assert status == 0, "tokend did not stop cleanly (%s): %s" % (status, process.log())


class TokenPool:
    """Token endpoint responses minted at the IdP, in batches (one `idp.py mint` is ~0.4 s), with
    ``scope`` (default: the IdP's, ``read``)."""

    def __init__(self, idp: IdentityProvider, lifetime: int, scope: str | None = None) -> None:
        self.idp = idp
        self.lifetime = lifetime
        self.scope = scope
        self.tokens: list[dict] = []

    def take(self) -> dict:
        if not self.tokens:
            self.tokens = self.idp.mint(count=20, lifetime=self.lifetime, scope=self.scope)
        return self.tokens.pop()


@pytest.fixture(scope="session")
def pool(idp) -> TokenPool:
    return TokenPool(idp, lifetime=3600)


@pytest.fixture(scope="session")
def read_write_pool(idp) -> TokenPool:
    """Pairs with the scope ``read write`` (one hour), for narrowed tokens."""
    return TokenPool(idp, lifetime=3600, scope="read write")


@pytest.fixture(scope="session")
def expired_pool(idp) -> TokenPool:
    """Pairs whose access token the IdP already considers expired (lifetime 0); their refresh
    tokens are good."""
    return TokenPool(idp, lifetime=0)


@pytest.fixture
def client(daemon) -> Iterator[tokend.Client]:
    with tokend.Client(daemon.socket_path, timeout=10) as c:
        yield c


_numbers = itertools.count(1)


@pytest.fixture
def user(request, daemon) -> Iterator[str]:
    """A user identifier no other test uses; its credential is removed after the test."""
    name = "py-%d-%s" % (next(_numbers), re.sub(r"[^a-z0-9]+", "-", request.node.name.lower())[:40].strip("-"))
    yield name
    with tokend.Client(daemon.socket_path, timeout=10) as cleanup:
        try:
            cleanup.remove_credential(name)
        except tokend.UnknownUser:
            pass


@pytest.fixture
def enrolled(client, user, pool) -> dict:
    """``user`` with a credential from a fresh token pair (lifetime one hour). Returns the pair."""
    response = pool.take()
    client.add_token_response(user, PROVIDER, response)
    return response


@pytest.fixture
def dpop_enrolled(client, user) -> str:
    """``user`` with a DPoP-bound credential of ``DPOP_PROVIDER`` (token type ``DPoP``, valid for an
    hour, no refresh token): tokend made its key at enrolment. Returns the access token."""
    access_token = "dpop-at-" + secrets.token_urlsafe(24)
    client.add_credential(user, DPOP_PROVIDER, access_token, token_type="DPoP", expires_in=3600)
    return access_token


@pytest.fixture
def stale(client, user, expired_pool, idp) -> dict:
    """``user`` with a token that tokend believes valid for an hour but that the IdP (and so the
    resource server) no longer accepts: the situation a 401 retry is for. Its refresh token is
    good. (Revoking the access token at the IdP is no way to get there: this DOT revokes the
    refresh token with it, RFC 7009 §2.1.)"""
    response = dict(expired_pool.take(), expires_in=3600)
    client.add_token_response(user, PROVIDER, response)
    assert idp.introspect(response["access_token"])["active"] is False
    return response


@pytest.fixture
def api(idp) -> Iterator[ResourceServer]:
    server = ResourceServer(idp)
    yield server
    server.close()

"""Narrowed tokens: ``token(user, scope=..., resource=...)`` asks tokend for a token narrowed to part
of the credential's scope and/or to one API (RFC 8707), which tokend gets from the provider with
a refresh grant and keeps fresh apart from the credential's own token.

First without the daemon: a Unix socket server in the test records what the client sends and
answers with a fixed reply. Then against the real tokend, whose provider ``narrowed`` is the test
IdP with ``narrowed_tokens = true``, with credentials minted with the scope ``read write``; what
the IdP issued is checked with its introspection. django-oauth-toolkit narrows the refresh token
itself on a narrowed grant (and drops the access token issued before it), so each of these tests
has a daemon of its own, and none refreshes a credential's own token after a narrowed grant.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import Iterator

import httpx
import pytest
import requests
from helpers import NARROWED_PROVIDER, PROVIDER, Daemon, SilentServer, cli, narrowed_provider, refused_twice

import tokend
from tokend.httpx import TokendAuth as HttpxAuth
from tokend.requests import TokendAuth as RequestsAuth

METHOD = "io.tokend.TokenProvider.ProvideTokenReplacement"
RESOURCE = "https://api.example.com/v1"
CREDENTIALS = {"userIdentifier": "alice", "accessToken": "tok-SECRET", "tokenType": "Bearer", "expiresAt": 2000000000, "scope": "read"}
REPLY = json.dumps({"parameters": {"credentials": CREDENTIALS}}).encode() + b"\0"


def run(coroutine, limit: float = 30.0):
    return asyncio.run(asyncio.wait_for(coroutine, limit))


def sent_parameters(server: SilentServer) -> list[dict]:
    """The parameters of every call ``server`` received, in order (all ProvideTokenReplacement)."""
    calls = [json.loads(message) for message in server.received.split(b"\0") if message]
    assert all(call["method"] == METHOD for call in calls), calls
    return [call["parameters"] for call in calls]


@pytest.fixture
def fake(tmp_path) -> Iterator[SilentServer]:
    """A fake tokend that answers every call with alice's credentials narrowed to ``read``."""
    server = SilentServer(str(tmp_path / "narrowed.sock"), reply=REPLY)
    yield server
    server.close()


# --- without the daemon ------------------------------------------------------------------------


def test_scope_and_resource_are_sent_exactly_when_given(fake):
    with tokend.Client(fake.path, timeout=2) as client:
        client.token("alice")
        client.token("alice", scope="read")
        client.token("alice", resource=RESOURCE)
        credentials = client.token("alice", min_valid=60, rejected="tok-OLD", scope="read write", resource=RESOURCE)
    assert credentials.scope == "read" and credentials.access_token == "tok-SECRET"
    assert sent_parameters(fake) == [
        {"userIdentifier": "alice"},
        {"userIdentifier": "alice", "scope": "read"},
        {"userIdentifier": "alice", "resource": RESOURCE},
        {"userIdentifier": "alice", "minValidSeconds": 60, "rejectedToken": "tok-OLD", "scope": "read write", "resource": RESOURCE},
    ]


def test_async_scope_and_resource_are_sent_exactly_when_given(fake):
    async def scenario():
        async with tokend.AsyncClient(fake.path, timeout=2) as client:
            await client.token("alice")
            return await client.token("alice", scope="read", resource=RESOURCE)

    assert run(scenario()).scope == "read"
    assert sent_parameters(fake) == [{"userIdentifier": "alice"}, {"userIdentifier": "alice", "scope": "read", "resource": RESOURCE}]


def test_the_auths_ask_for_the_narrowed_token_and_report_it_on_a_401(fake):
    narrowed = {"userIdentifier": "alice", "minValidSeconds": 30, "scope": "read", "resource": RESOURCE}
    rejected = dict(narrowed, rejectedToken="tok-SECRET")
    client = tokend.Client(fake.path, timeout=2)

    # requests: the header, then the hook of a 401 reports the token. The fake tokend answers
    # with the same token again, so the 401 is handed back without a retry.
    auth = RequestsAuth("alice", client=client, scope="read", resource=RESOURCE)
    prepared = auth(requests.Request("GET", RESOURCE + "/items").prepare())
    assert prepared.headers["Authorization"] == "Bearer tok-SECRET"
    unauthorized = requests.Response()
    unauthorized.status_code = 401
    unauthorized.request = prepared
    (hook,) = prepared.hooks["response"]
    assert hook(unauthorized) is unauthorized
    assert sent_parameters(fake) == [narrowed, rejected]
    assert auth == RequestsAuth("alice", client=client, scope="read", resource=RESOURCE)
    assert auth != RequestsAuth("alice", client=client, scope="read")
    assert "scope='read'" in repr(auth) and repr(RESOURCE) in repr(auth)
    assert "scope" not in repr(RequestsAuth("alice", client=client))

    # httpx, sync and async flows: the same two calls each.
    fake.received = b""
    flow = HttpxAuth("alice", client=client, scope="read", resource=RESOURCE).sync_auth_flow(httpx.Request("GET", RESOURCE))
    request = next(flow)
    assert request.headers["Authorization"] == "Bearer tok-SECRET"
    with pytest.raises(StopIteration):
        flow.send(httpx.Response(401, request=request))
    client.close()

    async def scenario():
        auth = HttpxAuth("alice", async_client=tokend.AsyncClient(fake.path, timeout=2), scope="read", resource=RESOURCE)
        flow = auth.async_auth_flow(httpx.Request("GET", RESOURCE))
        request = await flow.__anext__()
        with pytest.raises(StopAsyncIteration):
            await flow.asend(httpx.Response(401, request=request))
        await auth.async_client.aclose()
        return request

    assert run(scenario()).headers["Authorization"] == "Bearer tok-SECRET"
    assert sent_parameters(fake) == [narrowed, rejected] * 2
    assert repr(HttpxAuth("alice", scope="read")) == "TokendAuth(user='alice', scope='read')"


@pytest.mark.parametrize(
    "reply, kind, check",
    [
        (
            {"error": "io.tokend.TokenProvider.InvalidCredential",
             "parameters": {"reason": "scope 'admin' is not among the credential's scope 'read write'"}},
            tokend.InvalidCredential,
            lambda error: "'admin'" in error.reason and "'admin'" in str(error),
        ),
        (
            {"error": "io.tokend.TokenProvider.RefreshFailed",
             "parameters": {"userIdentifier": "alice", "reason": "invalid_scope", "retryAt": 1700000000}},
            tokend.RefreshFailed,
            lambda error: error.user_identifier == "alice" and error.reason == "invalid_scope" and error.retry_at.timestamp() == 1700000000,
        ),
        (
            {"error": "org.varlink.service.InvalidParameter", "parameters": {"parameter": "scope"}},
            tokend.InvalidParameter,
            lambda error: error.parameter == "scope" and "'scope'" in str(error),
        ),
        (
            {"error": "org.varlink.service.InvalidParameter", "parameters": {"parameter": "resource"}},
            tokend.InvalidParameter,
            lambda error: error.parameter == "resource" and "'resource'" in str(error),
        ),
    ],
)
def test_narrowing_errors_map_to_their_exceptions(tmp_path, reply, kind, check):
    server = SilentServer(str(tmp_path / "errors.sock"), reply=json.dumps(reply).encode() + b"\0")
    try:
        with pytest.raises(kind) as caught:
            tokend.Client(server.path, timeout=2).token("alice", rejected="tok-SECRET-rejected", scope="read admin", resource="not a uri")
    finally:
        server.close()
    error = caught.value
    assert type(error) is kind and error.error_name == reply["error"] and error.method == METHOD
    assert check(error), error
    for text in (str(error), repr(error), repr(error.parameters)):
        assert "tok-SECRET" not in text


def test_scope_and_resource_are_checked_before_anything_is_sent(fake):
    client = tokend.Client(fake.path, timeout=2)
    for arguments, parameter in (
        ({"scope": ""}, "scope"),
        ({"scope": ["read"]}, "scope"),
        ({"resource": ""}, "resource"),
        ({"resource": 7}, "resource"),
    ):
        with pytest.raises(tokend.InvalidParameter) as caught:
            client.token("alice", **arguments)
        assert caught.value.error_name is None and caught.value.parameter == parameter, arguments
        with pytest.raises(tokend.InvalidParameter):
            run(tokend.AsyncClient(fake.path).token("alice", **arguments))
        for auth in (RequestsAuth, HttpxAuth):
            with pytest.raises(tokend.InvalidParameter):
                auth("alice", client=client, **arguments)
    assert fake.received == b""


# --- against tokend and the IdP ------------------------------------------------------------------

_daemons = itertools.count(1)


@pytest.fixture
def narrowed_daemon(scratch, idp) -> Iterator[Daemon]:
    """A tokend of its own with the provider ``narrowed`` (``narrowed_tokens = true``); callers
    may force a token to be replaced once a second (``forced_refresh_interval``)."""
    directory = scratch / ("narrowed-%d" % next(_daemons))
    directory.mkdir()
    process = Daemon(directory, idp, extra_daemon='forced_refresh_interval = "1s"\n', extra_providers=narrowed_provider(idp))
    process.start()
    yield process
    status = process.stop()
    assert status == 0, "tokend did not stop cleanly (%s): %s" % (status, process.log())


@pytest.fixture
def nclient(narrowed_daemon) -> Iterator[tokend.Client]:
    with tokend.Client(narrowed_daemon.socket_path, timeout=10) as c:
        yield c


@pytest.fixture
def narrowable(nclient, user, read_write_pool) -> dict:
    """``user`` with a credential of the provider ``narrowed`` whose scope is ``read write``."""
    response = read_write_pool.take()
    assert response["scope"] == "read write"
    nclient.add_token_response(user, NARROWED_PROVIDER, response)
    return response


def test_narrowed_token_has_the_narrowed_scope_and_is_cached(nclient, idp, user, narrowable):
    grants = idp.count_posts()

    narrowed = nclient.token(user, scope="read")

    assert narrowed.user_identifier == user and narrowed.scope == "read" and narrowed.token_type == "Bearer"
    assert narrowed.access_token != narrowable["access_token"]
    assert 3500 < narrowed.expires_in() <= 3605
    assert narrowed.access_token not in repr(narrowed)
    assert idp.count_posts() == grants + 1
    issued = idp.introspect(narrowed.access_token)
    assert issued["active"] is True and issued["scope"] == "read"
    # Asked again: the same token, from tokend's memory.
    assert nclient.token(user, scope="read", min_valid=60).access_token == narrowed.access_token
    # The credential's own token is still the one stored, with its whole scope.
    own = nclient.token(user)
    assert own.access_token == narrowable["access_token"] and own.scope == "read write"
    assert idp.count_posts() == grants + 1


def test_narrowed_token_for_a_resource(nclient, idp, user, narrowable, read_write_pool):
    grants = idp.count_posts()
    for_api = nclient.token(user, resource=RESOURCE)
    assert for_api.access_token != narrowable["access_token"]
    issued = idp.introspect(for_api.access_token)
    assert issued["active"] is True and issued["aud"] == [RESOURCE]
    assert nclient.token(user, resource=RESOURCE).access_token == for_api.access_token
    assert idp.count_posts() == grants + 1

    # Both: the scope and the audience.
    other = user + "-both"
    nclient.add_token_response(other, NARROWED_PROVIDER, read_write_pool.take())
    both = nclient.token(other, scope="read", resource=RESOURCE)
    assert both.scope == "read"
    issued = idp.introspect(both.access_token)
    assert issued["active"] is True and issued["scope"] == "read" and issued["aud"] == [RESOURCE]


#: Past the daemon's forced_refresh_interval (1 s), which counts from the narrowed grant: until
#: then tokend refuses to replace a narrowed token it just got (RefreshFailedError), as it does for a
#: credential's token it just refreshed.
PAST_FORCED_REFRESH_INTERVAL = 1.2


def test_a_rejected_narrowed_token_is_replaced_and_a_stale_one_gets_the_current(nclient, idp, user, narrowable):
    first = nclient.token(user, scope="read")
    with pytest.raises(tokend.RefreshFailed) as too_soon:
        nclient.token(user, scope="read", rejected=first.access_token)
    assert too_soon.value.retry_at is not None and first.access_token not in str(too_soon.value)
    time.sleep(PAST_FORCED_REFRESH_INTERVAL)
    grants = idp.count_posts()

    second = nclient.token(user, scope="read", rejected=first.access_token)
    assert second.access_token != first.access_token and second.scope == "read"
    assert idp.count_posts() == grants + 1
    assert idp.introspect(second.access_token)["active"] is True

    # The refused token is stale now: the current narrowed token, without a grant.
    assert nclient.token(user, scope="read", rejected=first.access_token).access_token == second.access_token
    assert idp.count_posts() == grants + 1
    # Rejecting the narrowed token left the credential's own token alone.
    assert nclient.token(user).access_token == narrowable["access_token"]


def test_narrowing_errors_from_tokend(nclient, idp, user, narrowable, pool):
    plain = user + "-plain"  # of the provider idp: narrowed_tokens is off
    nclient.add_token_response(plain, PROVIDER, pool.take())
    grants = idp.count_posts()

    # A scope the credential lacks, and a provider without narrowed tokens.
    for name, scope in ((user, "admin"), (user, "read admin"), (plain, "read")):
        with pytest.raises(tokend.InvalidCredential) as invalid:
            nclient.token(name, scope=scope)
        assert invalid.value.reason and invalid.value.method == METHOD, (name, scope)
    # What tokend refuses to read, by parameter.
    for arguments, parameter in (
        ({"resource": "not a uri"}, "resource"),
        ({"resource": RESOURCE + "#part"}, "resource"),
        ({"scope": "read", "resource": "/relative"}, "resource"),
        ({"scope": 'read "write"'}, "scope"),
        ({"scope": "   "}, "scope"),
    ):
        with pytest.raises(tokend.InvalidParameter) as caught:
            nclient.token(user, **arguments)
        assert caught.value.error_name == "org.varlink.service.InvalidParameter"
        assert caught.value.parameter == parameter, arguments
    # An empty one sent as it is (this client refuses to send it) is tokend's InvalidParameterError too.
    with pytest.raises(tokend.InvalidParameter) as caught:
        nclient.call("ProvideTokenReplacement", {"userIdentifier": user, "scope": ""})
    assert caught.value.error_name is not None and caught.value.parameter == "scope"
    with pytest.raises(tokend.UnknownUser):
        nclient.token("py-nobody-narrowed", scope="read")
    assert idp.count_posts() == grants

    # A scope tokend allows (the credential says it has it) but the IdP refuses: the token was
    # minted with the scope read alone.
    claimed = user + "-claimed"
    response = dict(pool.take(), scope="read write")
    nclient.add_token_response(claimed, NARROWED_PROVIDER, response)
    with pytest.raises(tokend.RefreshFailed) as refused:
        nclient.token(claimed, scope="write")
    assert refused.value.user_identifier == claimed and refused.value.reason
    assert idp.count_posts() == grants + 1
    # Neither credential is the worse for it, and the connection is still good.
    assert nclient.token(claimed).access_token == response["access_token"]
    assert nclient.token(user).access_token == narrowable["access_token"]


def test_async_narrowed_token(narrowed_daemon, nclient, idp, user, narrowable):
    narrowed = nclient.token(user, scope="read")

    async def scenario():
        async with tokend.AsyncClient(narrowed_daemon.socket_path, timeout=10) as client:
            same = await client.token(user, scope="read")
            with pytest.raises(tokend.InvalidCredential):
                await client.token(user, scope="admin")
            with pytest.raises(tokend.InvalidParameter) as caught:
                await client.token(user, resource="not a uri")
            assert caught.value.parameter == "resource"
            return same

    assert run(scenario()).access_token == narrowed.access_token


def test_the_auths_send_the_narrowed_token(narrowed_daemon, nclient, api, user, narrowable):
    narrowed = nclient.token(user, scope="read")
    assert requests.get(api.url, auth=RequestsAuth(user, client=nclient, scope="read"), timeout=10).status_code == 200
    with httpx.Client(auth=HttpxAuth(user, client=nclient, scope="read"), timeout=10) as http:
        assert http.get(api.url).status_code == 200

    async def scenario():
        auth = HttpxAuth(user, async_client=tokend.AsyncClient(narrowed_daemon.socket_path, timeout=10), scope="read")
        async with httpx.AsyncClient(auth=auth, timeout=10) as http:
            return (await http.get(api.url)).status_code

    assert run(scenario()) == 200
    assert api.tokens() == [narrowed.access_token] * 3


def test_a_401_gets_one_new_narrowed_token(nclient, idp, api, user, narrowable):
    first = nclient.token(user, scope="read")
    time.sleep(PAST_FORCED_REFRESH_INTERVAL)
    response = refused_twice(api, idp, lambda: requests.get(api.url, auth=RequestsAuth(user, client=nclient, scope="read"), timeout=10))
    assert len(response.history) == 1
    seen = api.tokens()
    assert seen[0] == first.access_token
    assert seen[1] == nclient.token(user, scope="read").access_token != first.access_token
    assert nclient.token(user).access_token == narrowable["access_token"]


def test_cli_prints_a_narrowed_token(narrowed_daemon, nclient, user, narrowable):
    result = cli("token", user, "--scope", "read", "--resource", RESOURCE, socket=narrowed_daemon.socket_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == nclient.token(user, scope="read", resource=RESOURCE).access_token + "\n"
    assert result.stdout != narrowable["access_token"] + "\n"
    refused = cli("token", user, "--resource", "not a uri", socket=narrowed_daemon.socket_path)
    assert refused.returncode == 1 and refused.stdout == "" and "resource" in refused.stderr

"""tokend.httpx.TokendAuth, sync and async, against the real resource server and IdP."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from helpers import ResourceServer, SilentServer, refused_twice

import tokend
from tokend.httpx import TokendAuth


def run(coroutine, limit: float = 30.0):
    return asyncio.run(asyncio.wait_for(coroutine, limit))


def test_sync_valid_token_one_request_no_grant(client, idp, api, user, enrolled):
    grants = idp.count_posts()
    with httpx.Client(auth=TokendAuth(user, client=client), timeout=10) as http:
        assert http.get(api.url).status_code == 200
    assert api.tokens() == [enrolled["access_token"]]
    assert idp.count_posts() == grants


def test_sync_401_refreshes_once_and_retries_once(client, idp, api, user, stale):
    grants = idp.count_posts()
    with httpx.Client(auth=TokendAuth(user, client=client), timeout=10) as http:
        response = http.post(api.url, content=b"sync-body")
    assert response.status_code == 200
    assert response.json()["body"] == "sync-body"
    assert idp.count_posts() == grants + 1
    assert api.count == 2
    fresh = client.token(user).access_token
    assert api.tokens() == [stale["access_token"], fresh] and fresh != stale["access_token"]
    assert [entry["body"] for entry in api.seen] == [b"sync-body"] * 2
    assert [r.status_code for r in response.history] == [401]
    # The retried request is a copy carrying the new header; the first keeps the old one.
    assert response.request.headers["Authorization"] == "Bearer " + fresh
    assert response.history[0].request.headers["Authorization"] == "Bearer " + stale["access_token"]
    assert response.request is not response.history[0].request


def test_sync_second_401_no_third_attempt(client, idp, api, user, enrolled):
    refused_twice(api, idp, lambda: httpx.get(api.url, auth=TokendAuth(user, client=client), timeout=10))


def test_sync_streamed_body_is_not_retried(client, idp, api, user, stale):
    grants = idp.count_posts()

    def chunks():
        yield b"one-shot"

    with httpx.Client(auth=TokendAuth(user, client=client), timeout=10) as http:
        response = http.post(api.url, content=chunks())
    assert response.status_code == 401
    assert api.count == 1
    assert idp.count_posts() == grants


def test_async_401_refreshes_once_and_retries_once(daemon, idp, api, user, stale):
    grants = idp.count_posts()

    async def scenario():
        auth = TokendAuth(user, async_client=tokend.AsyncClient(daemon.socket_path, timeout=10))
        async with httpx.AsyncClient(auth=auth, timeout=10) as http:
            first = await http.post(api.url, json={"n": 1})
            second = await http.get(api.url)
        return first, second

    first, second = run(scenario())
    assert first.status_code == 200 and second.status_code == 200
    assert [r.status_code for r in first.history] == [401]
    assert idp.count_posts() == grants + 1
    assert api.count == 3  # 401, retry, then the next request with the new token at once
    tokens = api.tokens()
    assert tokens[0] == stale["access_token"] and tokens[1] == tokens[2] != tokens[0]
    assert api.seen[0]["body"] == api.seen[1]["body"] == b'{"n":1}'


def test_async_second_401_no_third_attempt(daemon, idp, api, user, enrolled):
    async def scenario():
        auth = TokendAuth(user, async_client=tokend.AsyncClient(daemon.socket_path, timeout=10))
        async with httpx.AsyncClient(auth=auth, timeout=10) as http:
            return await http.get(api.url)

    refused_twice(api, idp, lambda: run(scenario()))


def test_async_flow_does_not_block_the_event_loop(tmp_path, api):
    """The async flow asks tokend with AsyncClient: while tokend does not answer, other tasks
    run (a blocking Client would freeze the loop until its timeout)."""
    server = SilentServer(str(tmp_path / "silent.sock"))

    async def scenario():
        auth = TokendAuth("alice", async_client=tokend.AsyncClient(server.path, timeout=1.0))
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                await asyncio.sleep(0.05)
                ticks += 1

        task = asyncio.ensure_future(ticker())
        try:
            async with httpx.AsyncClient(auth=auth, timeout=10) as http:
                with pytest.raises(tokend.Timeout):
                    await http.get(api.url)
        finally:
            task.cancel()
        return ticks

    try:
        ticks = run(scenario(), limit=10)
    finally:
        server.close()
    assert ticks >= 5  # ~20 expected in the 1 s the call waits
    assert api.count == 0


def test_async_errors_reach_the_caller(daemon, api):
    async def scenario():
        auth = TokendAuth("py-nobody-httpx", async_client=tokend.AsyncClient(daemon.socket_path, timeout=10))
        async with httpx.AsyncClient(auth=auth, timeout=10) as http:
            with pytest.raises(tokend.UnknownUser):
                await http.get(api.url)

    run(scenario())
    assert api.count == 0


def test_a_401_from_another_origin_after_a_redirect_gets_no_token(client, idp, api, user, enrolled):
    other = ResourceServer(idp)
    try:
        api.redirect_to = other.url
        grants = idp.count_posts()
        with httpx.Client(auth=TokendAuth(user, client=client), timeout=10, follow_redirects=True) as http:
            response = http.get(api.redirect_url)
        assert response.status_code == 401
        assert api.tokens() == [enrolled["access_token"]]
        assert other.tokens() == [""]
        assert idp.count_posts() == grants
    finally:
        other.close()

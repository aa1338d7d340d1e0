"""tokend.AsyncClient against the real tokend and IdP. Each test runs its own event loop, bounded
by asyncio.wait_for."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import time

import pytest
from helpers import PROVIDER, FullAcceptQueue, SilentServer, decode_jwt

import tokend


def run(coroutine, limit: float = 30.0):
    return asyncio.run(asyncio.wait_for(coroutine, limit))


def test_async_token_and_errors(daemon, idp, user):
    response = idp.mint(count=1, lifetime=60)[0]

    async def scenario():
        async with tokend.AsyncClient(daemon.socket_path, timeout=10) as client:
            await client.add_token_response(user, PROVIDER, response)
            current = await client.token(user)
            assert current.access_token == response["access_token"]
            assert response["access_token"] not in repr(current)
            grants = idp.count_posts()
            fresh = await client.token(user, min_valid=120)
            assert fresh.access_token != response["access_token"]
            assert idp.count_posts() == grants + 1
            with pytest.raises(tokend.UnknownUser):
                await client.token("py-nobody-async")
            # Still usable after an error reply.
            status = await client.status(user)
            assert status.credentials[0].refresh_count == 1
            everything = await client.status()
            assert user in [c.user_identifier for c in everything.credentials]
            return fresh

    fresh = run(scenario())
    assert idp.introspect(fresh.access_token)["active"] is True


def test_async_dpop_proof_and_errors(daemon, user, dpop_enrolled, pool):
    url = "https://api.example.com/v1/items"
    bearer = pool.take()

    async def scenario():
        async with tokend.AsyncClient(daemon.socket_path, timeout=10) as client:
            first = await client.dpop_proof(user, "GET", url + "?q=1#f", nonce="n-1")
            second = await client.dpop_proof(user, "POST", url, min_valid=60)
            await client.add_token_response(user + "-bearer", PROVIDER, bearer)
            try:
                with pytest.raises(tokend.InvalidCredential) as unbound:
                    await client.dpop_proof(user + "-bearer", "GET", url)
                assert unbound.value.reason and "not DPoP-bound" in unbound.value.reason
            finally:
                await client.remove_credential(user + "-bearer")
            with pytest.raises(tokend.InvalidParameter) as invalid:
                await client.dpop_proof(user, "GET", "ftp://x")
            assert invalid.value.parameter == "httpUri"
            with pytest.raises(tokend.UnknownUser):
                await client.dpop_proof("py-nobody-async", "GET", url)
            # Still usable after error replies.
            third = await client.dpop_proof(user, "GET", url)
            return first, second, third

    first, second, third = run(scenario())
    assert all(isinstance(proof, tokend.DPoPProof) for proof in (first, second, third))
    assert first.credentials.access_token == dpop_enrolled and first.credentials.token_type == "DPoP"
    assert first.headers == {"Authorization": "DPoP " + dpop_enrolled, "DPoP": first.proof}
    assert dpop_enrolled not in repr(first) and first.proof not in repr(first)
    (header, claims, _, _), (second_header, second_claims, _, _) = decode_jwt(first.proof), decode_jwt(second.proof)
    assert header["typ"] == "dpop+jwt" and header["alg"] == "ES256" and "d" not in header["jwk"]
    assert (claims["htm"], claims["htu"], claims["nonce"]) == ("GET", url, "n-1")
    assert (second_claims["htm"], second_claims["htu"]) == ("POST", url) and "nonce" not in second_claims
    ath = base64.urlsafe_b64encode(hashlib.sha256(dpop_enrolled.encode()).digest()).decode().rstrip("=")
    assert claims["ath"] == second_claims["ath"] == ath
    assert len({claims["jti"], second_claims["jti"], decode_jwt(third.proof)[1]["jti"]}) == 3
    assert header["jwk"] == second_header["jwk"]  # the same key


def test_async_calls_share_one_connection(daemon, user, enrolled):
    async def scenario():
        client = tokend.AsyncClient(daemon.socket_path, timeout=10)
        await client.token(user)
        connection = client._connection
        tokens = await asyncio.gather(*(client.token(user) for _ in range(20)))
        assert client._connection is connection
        await client.aclose()
        return {c.access_token for c in tokens}

    assert run(scenario()) == {enrolled["access_token"]}


def test_async_client_survives_a_new_event_loop(daemon, user, enrolled):
    client = tokend.AsyncClient(daemon.socket_path, timeout=10)
    assert run(client.token(user)).access_token == enrolled["access_token"]
    # asyncio.run closed that loop; the client opens a new connection in the next one.
    assert run(client.token(user)).access_token == enrolled["access_token"]


def test_async_watch(daemon, user, enrolled, pool):
    replacement = pool.take()

    async def scenario():
        client = tokend.AsyncClient(daemon.socket_path, timeout=10)
        seen = []
        with pytest.raises(tokend.UnknownUser):
            async with client.watch(user, idle_timeout=10) as updates:
                async for credentials in updates:
                    seen.append(credentials.access_token)
                    if len(seen) == 1:
                        await client.add_token_response(user, PROVIDER, replacement, replace=True)
                    else:
                        await client.remove_credential(user)
        await client.aclose()
        return seen

    assert run(scenario()) == [enrolled["access_token"], replacement["access_token"]]


def test_async_watch_closed_by_another_task(daemon, user, enrolled):
    async def scenario():
        client = tokend.AsyncClient(daemon.socket_path, timeout=10)
        updates = client.watch(user)
        first = await updates.__anext__()
        asyncio.get_running_loop().call_later(0.3, lambda: asyncio.ensure_future(updates.aclose()))
        started = time.monotonic()
        with pytest.raises(StopAsyncIteration):
            await updates.__anext__()
        return first, time.monotonic() - started

    first, elapsed = run(scenario())
    assert first.access_token == enrolled["access_token"]
    assert 0.25 < elapsed < 3


def test_async_timeout_and_missing_socket(tmp_path):
    server = SilentServer(str(tmp_path / "silent.sock"))

    async def scenario():
        client = tokend.AsyncClient(server.path, timeout=0.5)
        started = time.monotonic()
        with pytest.raises(tokend.Timeout):
            await client.token("alice")
        elapsed = time.monotonic() - started
        with pytest.raises(tokend.Timeout):
            async for _ in client.watch("alice"):
                pass
        missing = str(tmp_path / "missing.sock")
        with pytest.raises(tokend.DaemonUnavailable) as caught:
            await tokend.AsyncClient(missing).token("alice")
        assert missing in str(caught.value)
        return elapsed

    try:
        elapsed = run(scenario(), limit=10)
    finally:
        server.close()
    assert 0.45 <= elapsed < 2.0
    assert b"ProvideTokenReplacement" in server.received


def test_async_a_full_accept_queue_delays_the_call_instead_of_failing_it(tmp_path):
    """A Unix socket whose accept queue is full refuses a connect at once (EAGAIN), which
    asyncio's sock_connect would take for a connect in progress: the client tries again until its
    timeout, so a burst of other clients delays a call, not fails it."""
    queue = FullAcceptQueue(str(tmp_path / "full.sock"))

    async def scenario():
        async with tokend.AsyncClient(queue.path, timeout=20) as client:
            call = asyncio.ensure_future(client.token("alice"))
            await asyncio.sleep(0.3)  # a client that does not wait has failed by now
            assert not call.done(), call
            answered = await asyncio.get_running_loop().run_in_executor(None, queue.answer_once, b"this is not json\0")
            assert answered
            # It reached the server and read its answer (which is not Varlink).
            with pytest.raises(tokend.ProtocolError):
                await call

    try:
        run(scenario())
    finally:
        queue.close()

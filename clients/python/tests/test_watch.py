"""Client.watch against the real tokend: replies at once, on replacement, on refresh, on removal."""

from __future__ import annotations

import threading
import time

import pytest
from helpers import PROVIDER

import tokend


def test_watch_first_reply_at_once_then_replacement_then_removal(client, user, enrolled, pool):
    replacement = pool.take()
    with client.watch(user, idle_timeout=10) as updates:
        started = time.monotonic()
        first = next(updates)
        assert time.monotonic() - started < 2
        assert first.access_token == enrolled["access_token"]
        assert first.user_identifier == user

        # The watch has its own connection: the client's calls go on meanwhile.
        client.add_token_response(user, PROVIDER, replacement, replace=True)
        second = next(updates)
        assert second.access_token == replacement["access_token"]
        assert client.token(user).access_token == replacement["access_token"]

        client.remove_credential(user)
        with pytest.raises(tokend.UnknownUser) as caught:
            next(updates)
        assert caught.value.user_identifier == user
        # The stream has ended.
        with pytest.raises(StopIteration):
            next(updates)


def test_watch_reports_the_refresh_of_a_short_lived_token(client, idp, user):
    response = idp.mint(count=1, lifetime=4)[0]
    client.add_token_response(user, PROVIDER, response)
    grants = idp.count_posts()
    seen = []
    with client.watch(user, idle_timeout=15) as updates:
        for credentials in updates:
            seen.append(credentials)
            if len(seen) == 2:
                break
    assert seen[0].access_token == response["access_token"]
    assert seen[1].access_token != response["access_token"]
    # tokend refreshed on its own (at about two thirds of the 4 s), with one grant; the new
    # token has the IdP's lifetime (an hour).
    assert idp.count_posts() == grants + 1
    assert (seen[1].expires_at - seen[0].expires_at).total_seconds() > 1800
    assert idp.introspect(seen[1].access_token)["active"] is True
    assert client.token(user).access_token == seen[1].access_token


def test_watch_of_an_unknown_user_fails_at_once(client):
    updates = client.watch("py-nobody-watches-this")
    with pytest.raises(tokend.UnknownUser):
        next(updates)
    with pytest.raises(StopIteration):
        next(updates)


def test_watch_ends_with_reauthentication_required(client, idp, user, enrolled):
    with client.watch(user, idle_timeout=10) as updates:
        next(updates)
        idp.revoke_refresh_token(enrolled["refresh_token"])
        with pytest.raises(tokend.ReauthenticationRequired):
            client.token(user, min_valid=7200)
        with pytest.raises(tokend.ReauthenticationRequired) as caught:
            next(updates)
        assert caught.value.reason == "invalid_grant"


def test_closing_a_watch_from_another_thread_stops_the_iteration(client, user, enrolled):
    updates = client.watch(user)  # no idle timeout: next() would wait for the next token
    assert next(updates).access_token == enrolled["access_token"]
    closer = threading.Timer(0.3, updates.close)
    closer.start()
    started = time.monotonic()
    try:
        with pytest.raises(StopIteration):
            next(updates)
    finally:
        closer.cancel()
    assert 0.25 < time.monotonic() - started < 3


def test_idle_timeout_bounds_the_wait_for_the_next_token(client, user, enrolled):
    with client.watch(user, idle_timeout=0.5) as updates:
        next(updates)
        started = time.monotonic()
        with pytest.raises(tokend.Timeout):
            next(updates)
        assert 0.45 <= time.monotonic() - started < 2

"""tokend.requests.TokendAuth against a real HTTP resource server that checks tokens at the real
IdP (introspection): a token the IdP no longer accepts gets 401, then exactly one refresh at the
IdP and exactly one retry."""

from __future__ import annotations

import io

import pytest
import requests
from helpers import ResourceServer, refused_twice

import tokend
from tokend.requests import TokendAuth


def test_a_valid_token_needs_one_request_and_no_grant(client, idp, api, user, enrolled):
    grants = idp.count_posts()
    response = requests.get(api.url, auth=TokendAuth(user, client=client), timeout=10)
    assert response.status_code == 200
    assert response.history == []
    assert api.tokens() == [enrolled["access_token"]]
    assert idp.count_posts() == grants


def test_401_refreshes_once_and_retries_once(client, idp, api, user, stale):
    grants = idp.count_posts()

    session = requests.Session()
    session.auth = TokendAuth(user, client=client)
    response = session.get(api.url, timeout=10)

    assert response.status_code == 200
    assert idp.count_posts() == grants + 1  # exactly one grant
    assert api.count == 2  # exactly two requests reached the API
    fresh = client.token(user).access_token
    assert fresh != stale["access_token"]
    assert api.tokens() == [stale["access_token"], fresh]
    assert [r.status_code for r in response.history] == [401]
    assert response.request.headers["Authorization"] == "Bearer " + fresh
    # The retry is a copy: the first request kept the header it was sent with.
    assert response.history[0].request.headers["Authorization"] == "Bearer " + stale["access_token"]
    # The next request uses the new token directly.
    assert session.get(api.url, timeout=10).status_code == 200
    assert api.count == 3 and idp.count_posts() == grants + 1


def test_a_second_401_is_returned_without_a_third_attempt(client, idp, api, user, enrolled):
    response = refused_twice(api, idp, lambda: requests.get(api.url, auth=TokendAuth(user, client=client), timeout=10))
    assert len(response.history) == 1
    first, second = api.tokens()
    assert first == enrolled["access_token"]
    assert second == client.token(user).access_token != first


def test_a_bytes_body_is_sent_again_on_the_retry(client, api, user, stale):
    response = requests.post(api.url, data=b"payload-bytes", auth=TokendAuth(user, client=client), timeout=10)
    assert response.status_code == 200 and response.json()["body"] == "payload-bytes"
    assert [entry["body"] for entry in api.seen] == [b"payload-bytes"] * 2


def test_a_seekable_file_body_is_rewound_for_the_retry(client, api, user, stale):
    body = io.BytesIO(b"0123456789file-body")
    body.seek(10)
    response = requests.put(api.url, data=body, auth=TokendAuth(user, client=client), timeout=10)
    assert response.status_code == 200
    assert [entry["body"] for entry in api.seen] == [b"file-body"] * 2


def test_a_streamed_body_is_not_retried(client, idp, api, user, stale):
    grants = idp.count_posts()

    def chunks():
        yield b"one-"
        yield b"shot"

    response = requests.post(api.url, data=chunks(), auth=TokendAuth(user, client=client), timeout=10)
    assert response.status_code == 401
    assert api.count == 1
    assert idp.count_posts() == grants


def test_a_refresh_refused_by_tokend_is_raised_to_the_caller(client, idp, api, user, stale):
    auth = TokendAuth(user, client=client)
    assert requests.get(api.url, auth=auth, timeout=10).status_code == 200
    # Make the fresh token unacceptable too. Within forced_refresh_interval (30 s) of the last
    # refresh, tokend refuses to replace a token it still considers valid: the 401 cannot be
    # fixed, and RefreshFailedError (with when to retry) reaches the caller, without a grant.
    idp.revoke_access_token(client.token(user).access_token)
    grants = idp.count_posts()
    with pytest.raises(tokend.RefreshFailed) as caught:
        requests.get(api.url, auth=auth, timeout=10)
    assert caught.value.retry_at is not None
    assert api.count == 3
    assert idp.count_posts() == grants


def test_reauthentication_required_is_raised_to_the_caller(client, idp, api, user, stale):
    idp.revoke_refresh_token(stale["refresh_token"])
    grants = idp.count_posts()
    with pytest.raises(tokend.ReauthenticationRequired) as caught:
        requests.get(api.url, auth=TokendAuth(user, client=client), timeout=10)
    assert caught.value.reason == "invalid_grant"
    assert api.count == 1
    assert idp.count_posts() == grants + 1


def test_tokend_errors_reach_the_caller_and_nothing_is_sent(client, api):
    with pytest.raises(tokend.UnknownUser):
        requests.get(api.url, auth=TokendAuth("py-nobody-requests", client=client), timeout=10)
    assert api.count == 0


def test_a_401_from_another_origin_after_a_redirect_gets_no_token(client, idp, api, user, enrolled):
    other = ResourceServer(idp)  # another port: another origin, where requests drops the header
    try:
        api.redirect_to = other.url
        grants = idp.count_posts()
        response = requests.get(api.redirect_url, auth=TokendAuth(user, client=client), timeout=10)
        assert response.status_code == 401
        assert api.tokens() == [enrolled["access_token"]]
        assert other.tokens() == [""]  # no retry with a fresh token to the other origin
        assert idp.count_posts() == grants
    finally:
        other.close()


def test_a_same_origin_redirect_keeps_the_retry(client, idp, api, user, stale):
    api.redirect_to = api.url
    grants = idp.count_posts()
    response = requests.get(api.redirect_url, auth=TokendAuth(user, client=client), timeout=10)
    assert response.status_code == 200
    assert idp.count_posts() == grants + 1
    fresh = client.token(user).access_token
    # /redirect, then /api/me refused (401), then /api/me again with the fresh token.
    assert [(entry["path"], entry["token"]) for entry in api.seen] == [
        ("/redirect", stale["access_token"]),
        ("/api/me", stale["access_token"]),
        ("/api/me", fresh),
    ]
